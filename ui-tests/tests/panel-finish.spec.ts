/**
 * The panel and the dashboard finished as a JupyterLab user expects, in the light and the dark
 * theme: the Environment diff reads from the snapshot's version to this runtime's; a finished
 * run's card has no ETA and its sparkline spans the whole run; the dashboard's legends show
 * values, its run picker is compact and opens on the newest run, and without a GPU its right
 * half says why; the folded Environment header fits; a store on this machine's own disk is
 * warned of readably, and the status-bar item is orange with its icon visible and a tooltip that
 * says why. Pictures of each state are kept with the results.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { openNotebook, shutDownKernels, writeNotebook } from './notebooks';
import { openPanel, PANEL } from './panel';

const DASHBOARD = '#jp-gpuws-training-dashboard';
const THEMES = ['light', 'dark'] as const;
// The plain server's own small environment (jupyter_server_test_config.py).
const ENV = path.join(os.tmpdir(), 'gpuws-ui-env');

// The page talks to the server's kernels directly (Galata's record of them stands between the
// page and a kernel: first-hour.spec.ts).
test.use({ viewport: { width: 1280, height: 800 }, kernels: null, sessions: null });

function sitePackages(): string {
  const lib = path.join(ENV, 'lib');
  const python = fs.readdirSync(lib).find(name => name.startsWith('python'))!;
  return path.join(lib, python, 'site-packages');
}

/** What `pip install arrow-pkg==<version>` leaves behind, written directly. */
function installFake(version: string): void {
  for (const old of fs.readdirSync(sitePackages()).filter(name => name.startsWith('arrow_pkg-'))) {
    fs.rmSync(path.join(sitePackages(), old), { recursive: true, force: true });
  }
  const info = path.join(sitePackages(), `arrow_pkg-${version}.dist-info`);
  fs.mkdirSync(info, { recursive: true });
  fs.writeFileSync(
    path.join(info, 'METADATA'),
    `Metadata-Version: 2.1\nName: arrow-pkg\nVersion: ${version}\n`
  );
  fs.writeFileSync(path.join(info, 'INSTALLER'), 'pip\n');
}

async function setTheme(page: IJupyterLabPageFixture, theme: 'light' | 'dark'): Promise<void> {
  if (theme === 'dark') {
    await page.theme.setDarkTheme();
  } else {
    await page.theme.setLightTheme();
  }
}

/** The contrast ratio (WCAG) of an element's text, or an SVG's fill, against the background
 * it is drawn on (the first ancestor with an opaque enough background). */
async function contrast(
  page: IJupyterLabPageFixture,
  selector: string,
  property: 'color' | 'fill'
): Promise<number> {
  return page.evaluate(
    ([selector, property]) => {
      const parse = (text: string): number[] => {
        const numbers = (text.match(/[\d.]+(e-?\d+)?/g) ?? []).map(Number);
        if (text.startsWith('color(')) {
          // color(srgb r g b / a), channels 0–1
          return [
            numbers[0] * 255,
            numbers[1] * 255,
            numbers[2] * 255,
            numbers.length > 3 ? numbers[3] : 1
          ];
        }
        return [numbers[0], numbers[1], numbers[2], numbers.length > 3 ? numbers[3] : 1];
      };
      const over = (top: number[], under: number[]) =>
        [0, 1, 2].map(k => top[k] * top[3] + under[k] * (1 - top[3]));
      const luminance = (rgb: number[]) => {
        const [r, g, b] = rgb.map(v => {
          const c = v / 255;
          return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
      };
      const element = document.querySelector(selector) as Element;
      let background: number[] | null = null;
      for (let el: Element | null = element; el && !background; el = el.parentElement) {
        const colour = parse(getComputedStyle(el).backgroundColor);
        if (colour[3] > 0.5) {
          background = colour;
        }
      }
      const back = over(background ?? [255, 255, 255, 1], [255, 255, 255, 1]);
      const front = over(parse(getComputedStyle(element)[property] as string), back);
      const [light, dark] = [luminance(front), luminance(back)].sort((a, b) => b - a);
      return (light + 0.05) / (dark + 0.05);
    },
    [selector, property] as const
  );
}

test.describe('Without a GPU', () => {
  test.afterEach(async ({ page }) => {
    await shutDownKernels(page, ['finish.ipynb']);
  });

  test.afterAll(() => {
    for (const old of fs
      .readdirSync(sitePackages())
      .filter(name => name.startsWith('arrow_pkg-'))) {
      fs.rmSync(path.join(sitePackages(), old), { recursive: true, force: true });
    }
  });

  test('a finished run, the dashboard, the Environment diff and its folded header, in both themes', async ({
    page
  }) => {
    test.setTimeout(240000);
    // Two runs, the newer one last: 200 steps each, finished.
    const cells = [
      '%load_ext jupyter_gpu_ws\nimport time, jupyter_gpu_ws as gpuws',
      'gpuws.progress(total=200, name="finish-older")\nfor i in range(200): gpuws.step(i, loss=2 / (i + 1)); time.sleep(0.01)',
      'gpuws.progress(total=200, name="finish-newer")\nfor i in range(200): gpuws.step(i, loss=1 / (i + 1)); time.sleep(0.01)'
    ];
    await writeNotebook(page, 'finish.ipynb', cells);
    installFake('65.5.0');
    await test.step('run the notebook', async () => {
      await openNotebook(page, 'finish.ipynb');
      await page.notebook.run();
    });
    await openPanel(page, 250);
    const panel = page.locator(PANEL);

    // The Environment: a snapshot with arrow-pkg 65.5.0, then an upgrade to 84.2.1 here.
    const env = panel.getByLabel('Environment');
    await expect(env.getByTestId('gpuws-env-summary')).not.toContainText('Reading', {
      timeout: 30000
    });
    await env.getByTestId('gpuws-env-snapshot').click();
    // The click's own snapshot must end before the upgrade below: a snapshot an earlier test
    // took already reads "Matches", and one still running would take in 84.2.1 (seen in CI).
    await expect(
      page.locator('.Toastify__toast', {
        hasText:
          /Environment snapshot \S+ kept in the store|The environment has not changed since the last snapshot/
      })
    ).toBeVisible({ timeout: 120000 });
    await expect(env.getByTestId('gpuws-env-summary')).toContainText('Matches the snapshot of', {
      timeout: 60000
    });
    installFake('84.2.1'); // the server sees site-packages change, the panel asks again by itself
    await expect(env.getByTestId('gpuws-env-summary')).toContainText(
      'Differs from the snapshot of',
      { timeout: 60000 }
    );
    const change = env.getByTestId('gpuws-env-diff').locator('li').filter({ hasText: 'arrow-pkg' });
    await expect(change).toHaveText('~ arrow-pkg 65.5.0 → 84.2.1');
    await expect(change).toHaveAttribute('title', '65.5.0 in the snapshot, 84.2.1 here');

    // The finished run's card: done, no "ETA 0 s", a sparkline over all 200 steps.
    // A card is titled with its notebook; the run's name is the title's tooltip.
    const run = panel
      .getByTestId('gpuws-training-run')
      .filter({ has: page.locator('[title="finish-newer"]') });
    await expect(run.getByTestId('gpuws-training-verdict')).toHaveText('All 200 steps done', {
      timeout: 30000
    });
    await expect(run.getByTestId('gpuws-training-progress')).toContainText('step 200/200');
    await expect(run.getByTestId('gpuws-training-progress')).not.toContainText('ETA');
    const spark = (await run.locator('svg.jp-gpuws-sparkline').getAttribute('aria-label')) ?? '';
    const [, first, last] = /over steps (\d+)–(\d+)$/.exec(spark) ?? ['', '-1', '-1'];
    expect(Number(first)).toBeLessThan(30); // from the start (the reader takes a few steps a point)
    expect(Number(last)).toBe(199);

    // The dashboard: the newest run first and open, a compact picker, legends with values,
    // and the GPU half saying why it is empty, in the GPU section's words.
    await panel.getByTestId('gpuws-open-dashboard').click();
    const dashboard = page.locator(DASHBOARD);
    const picker = dashboard.getByTestId('gpuws-dashboard-run');
    await expect(picker).toHaveValue('finish-newer', { timeout: 20000 });
    expect(await picker.locator('option').count()).toBeGreaterThanOrEqual(2);
    await expect(picker.locator('option').first()).toHaveAttribute('value', 'finish-newer');
    const pickerBox = (await picker.boundingBox())!;
    const dashboardBox = (await dashboard.boundingBox())!;
    expect(pickerBox.width).toBeLessThan(dashboardBox.width / 3);
    const metrics = await (await page.request.get('/gpuws/api/metrics')).json();
    expect(metrics.gpus).toEqual([]);
    await expect(dashboard.getByTestId('gpuws-dashboard-no-gpu')).toHaveText(
      `No GPU found. ${metrics.gpu_error}.`
    );

    for (const theme of THEMES) {
      await test.step(`the ${theme} theme`, () => setTheme(page, theme));
      await page.evaluate(async () => {
        await window.jupyterapp.commands.execute('gpuws:open-training-dashboard');
      });
      const legend = dashboard.getByTestId('gpuws-chart-loss').locator('.u-legend');
      await expect(legend).toBeVisible({ timeout: 20000 });
      // "step 199 · loss 0.00513": the newest point while the cursor is away.
      await expect(legend).toHaveText(/^\s*step\s*199\s*loss\s*0\.00\d+\s*$/);
      await expect(legend).not.toContainText('--');
      await page.screenshot({ path: test.info().outputPath(`dashboard-no-gpu-${theme}.png`) });

      // The folded Environment header says its word whole at the panel's usual width.
      await openPanel(page, 250);
      await panel.getByTestId('gpuws-fold-environment').click();
      const summary = panel
        .locator('[data-section="environment"]')
        .getByTestId('gpuws-section-summary');
      await expect(summary).toHaveText('differs');
      expect(await summary.evaluate(el => el.scrollWidth <= el.clientWidth)).toBeTruthy();
      await page.screenshot({ path: test.info().outputPath(`panel-finished-run-${theme}.png`) });
      await panel.getByTestId('gpuws-fold-environment').click();
    }
    await setTheme(page, 'light');
  });
});

test.describe("A store on this machine's own disk", () => {
  test.use({ baseURL: 'http://localhost:8889', autoGoto: true });

  test('is warned of readably, and the status-bar item is orange with a visible icon and says why, in both themes', async ({
    page
  }) => {
    await openPanel(page, 250);
    const warning = page.locator(PANEL).getByTestId('gpuws-local-store');
    await expect(warning).toBeVisible({ timeout: 30000 });
    const item = page.getByTestId('gpuws-status-item');
    await expect(item).toHaveClass(/jp-gpuws-status-warning/);
    await expect(item).toHaveAttribute(
      'title',
      /^Orange because:\n• Sync: The store is a folder on this machine's own disk/
    );
    for (const theme of THEMES) {
      await setTheme(page, theme);
      await openPanel(page, 250);
      await warning.scrollIntoViewIfNeeded();
      // WCAG AA for text; 3:1 for an icon.
      expect(
        await contrast(page, '[data-testid="gpuws-local-store"]', 'color')
      ).toBeGreaterThanOrEqual(4.5);
      expect(
        await contrast(page, '.jp-gpuws-status-icon .jp-icon3', 'fill')
      ).toBeGreaterThanOrEqual(3);
      expect(
        await contrast(page, '[data-testid="gpuws-status-sync"]', 'color')
      ).toBeGreaterThanOrEqual(3);
      await page.screenshot({ path: test.info().outputPath(`panel-local-store-${theme}.png`) });
    }
    await setTheme(page, 'light');
  });
});
