/**
 * The panel's layout at 1280×800 with a 250 px sidebar, in the light and dark themes, in five
 * states: no GPU, two simulated GPUs, a 40-minute runtime, an environment restore under way, a
 * persist under way. In each, nothing in the panel overflows or collides (DOM measures), and the
 * panel matches its reviewed picture (ui-tests/tests/panel-layout.spec.ts-snapshots/). The states
 * without a GPU run on a server of their own (port 8892), which no other test touches, so the
 * panel holds only what this spec put there. Each state's picture is also kept with the results;
 * with GPUWS_SCREENSHOTS=1 they are written to docs/images/ instead, for the documentation. Folding a
 * section survives a reload; the header's Persist button and its ⋯ menu work; the status bar
 * labels its GPU figures.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as http from 'http';
import * as net from 'net';
import * as os from 'os';
import * as path from 'path';
import { workspaceSaved } from './panel';

const PANEL = '#jp-gpuws-panel';
// The layout server's folders (port 8892: jupyter_server_test_config.py, GPUWS_UI_TEST_LAYOUT).
const ROOT = path.join(os.tmpdir(), 'gpuws-ui-layout-root');
const DEADLINE_FILE = path.join(os.tmpdir(), 'gpuws-ui-layout-deadline');
const ENV = path.join(os.tmpdir(), 'gpuws-ui-layout-env');
const STORE_BASE = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const STORE_FILES = path.join(STORE_BASE, 'gpuws-ui-layout-store', 'ui-tests', 'files');
const DOCS_IMAGES = path.join(__dirname, '..', '..', 'docs', 'images');

/** Where a picture goes: docs/images/ on request, else beside the test's results. */
function picturePath(name: string): string {
  return process.env.GPUWS_SCREENSHOTS
    ? path.join(DOCS_IMAGES, name)
    : test.info().outputPath(name);
}

test.use({ viewport: { width: 1280, height: 800 }, autoGoto: true });
// One state after the other on the same servers: in order, once.
test.describe.configure({ mode: 'serial', retries: 0 });

type Theme = 'light' | 'dark';

async function openPanel(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  await expect(page.locator(PANEL)).toBeVisible();
  await page.sidebar.setWidth(250, 'left');
  await expect(page.locator(PANEL).getByTestId('gpuws-connection')).toHaveAttribute(
    'data-state',
    'live',
    { timeout: 20000 }
  );
}

async function setTheme(page: IJupyterLabPageFixture, theme: Theme): Promise<void> {
  if (theme === 'dark') {
    await page.theme.setDarkTheme();
  } else {
    await page.theme.setLightTheme();
  }
}

/** Every kernel of the server shut down: a section lists what runs, and other tests leave some. */
async function shutDownKernels(page: IJupyterLabPageFixture): Promise<void> {
  const kernels = await (await page.request.get('/api/kernels')).json();
  for (const kernel of kernels) {
    await page.request.delete(`/api/kernels/${kernel.id}`);
  }
  await expect(page.locator(PANEL).getByTestId('gpuws-checkpoints-empty')).toBeVisible({
    timeout: 20000
  });
}

/** Elements of the panel whose content spills out of their own box (scrollWidth > clientWidth,
 * unless the box cuts it with an ellipsis on purpose), stick out of the panel, or overlap a
 * sibling; and single-line bars that wrapped. */
async function layoutProblems(page: IJupyterLabPageFixture): Promise<string[]> {
  return page.evaluate(selector => {
    const panel = document.querySelector(selector) as HTMLElement;
    const problems: string[] = [];
    const name = (el: Element) =>
      `${el.tagName.toLowerCase()}.${[...el.classList].join('.')}${el.getAttribute('data-testid') ? `[${el.getAttribute('data-testid')}]` : ''} "${(el.textContent ?? '').trim().slice(0, 40)}"`;
    if (panel.scrollWidth > panel.clientWidth) {
      problems.push(`the panel scrolls sideways: ${panel.scrollWidth} > ${panel.clientWidth}`);
    }
    const edge = panel.getBoundingClientRect().right;
    for (const el of Array.from(panel.querySelectorAll('*'))) {
      if (!(el instanceof HTMLElement) || el.closest('svg') || el.tagName === 'svg') {
        continue;
      }
      const style = getComputedStyle(el);
      if (style.display === 'none' || el.getClientRects().length === 0) {
        continue;
      }
      const clipped = style.overflowX !== 'visible' && style.textOverflow === 'ellipsis';
      if (
        el.scrollWidth > el.clientWidth + 1 &&
        el.clientWidth > 0 &&
        !clipped &&
        style.overflowX === 'visible'
      ) {
        problems.push(`${name(el)} overflows: ${el.scrollWidth} > ${el.clientWidth}`);
      }
      const box = el.getBoundingClientRect();
      if (box.width > 0 && box.right > edge + 0.5) {
        problems.push(`${name(el)} sticks out of the panel by ${Math.round(box.right - edge)} px`);
      }
      // Siblings in one row or column must not overlap (a title over its subtitle, say).
      const kids = Array.from(el.children).filter(
        (child): child is HTMLElement =>
          child instanceof HTMLElement &&
          child.getClientRects().length > 0 &&
          !['absolute', 'fixed', 'sticky'].includes(getComputedStyle(child).position)
      );
      for (let i = 0; i < kids.length; i++) {
        for (let j = i + 1; j < kids.length; j++) {
          const a = kids[i].getBoundingClientRect();
          const b = kids[j].getBoundingClientRect();
          const overlapX = Math.min(a.right, b.right) - Math.max(a.left, b.left);
          const overlapY = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
          if (overlapX > 1 && overlapY > 1) {
            problems.push(`${name(kids[i])} and ${name(kids[j])} overlap`);
          }
        }
      }
    }
    // Bars that hold one line: a second line means something wrapped.
    for (const el of Array.from(
      panel.querySelectorAll(
        '.jp-gpuws-header-bar, .jp-gpuws-header-status, .jp-gpuws-section-header, .jp-gpuws-empty, .jp-gpuws-bar-label'
      )
    )) {
      const height = (el as HTMLElement).getBoundingClientRect().height;
      if (height > 32) {
        problems.push(`${name(el)} wrapped: ${Math.round(height)} px high`);
      }
    }
    return problems;
  }, PANEL);
}

/** In both themes: nothing overflows; the panel's picture kept as panel-<state>-<theme>.png. */
async function checkBothThemes(
  page: IJupyterLabPageFixture,
  state: string,
  ready: () => Promise<void>
): Promise<void> {
  for (const theme of ['light', 'dark'] as Theme[]) {
    await setTheme(page, theme);
    await ready();
    await page.mouse.move(1200, 780); // no button drawn as hovered
    await page.locator(PANEL).evaluate(node => node.scrollTo(0, 0));
    await page.screenshot({ path: picturePath(`panel-${state}-${theme}.png`) });
    expect(await layoutProblems(page), `${state}, ${theme} theme`).toEqual([]);
    // The panel against its reviewed picture (docs/images/compared/, beside the whole-window
    // pictures of docs/images/): what moves by itself (clocks, ages, live figures,
    // sparklines) is masked; a changed layout, colour or wording elsewhere fails. After a change
    // that is meant: `jlpm playwright test tests/panel-layout.spec.ts --update-snapshots`, and
    // look at the new pictures before committing them.
    await expect(page.locator(PANEL)).toHaveScreenshot(`panel-${state}-${theme}.png`, {
      animations: 'disabled',
      caret: 'hide',
      mask: [
        page.locator(`${PANEL} .jp-gpuws-header-bar`),
        page.locator(`${PANEL} .jp-gpuws-section-summary`),
        page.locator(`${PANEL} [data-section="runtime"] .jp-gpuws-section-body`),
        page.locator(`${PANEL} [data-section="system"] .jp-gpuws-section-body`),
        page.locator(`${PANEL} [data-section="sync"] .jp-gpuws-section-body`),
        page.locator(`${PANEL} [data-section="environment"] .jp-gpuws-section-body`),
        page.locator(`${PANEL} .jp-gpuws-sparkline`)
      ],
      maxDiffPixelRatio: 0.02
    });
  }
  await setTheme(page, 'light');
}

function sitePackages(): string {
  const lib = path.join(ENV, 'lib');
  const python = fs.readdirSync(lib).find(name => name.startsWith('python'))!;
  return path.join(lib, python, 'site-packages');
}

/** What `pip install <name>==<version>` leaves behind, written directly. */
function addPackage(name: string, version: string): string {
  const info = path.join(sitePackages(), `${name.replace(/-/g, '_')}-${version}.dist-info`);
  fs.mkdirSync(info, { recursive: true });
  fs.writeFileSync(
    path.join(info, 'METADATA'),
    `Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\n`
  );
  fs.writeFileSync(path.join(info, 'INSTALLER'), 'pip\n');
  return info;
}

/** A package index on 127.0.0.1:8899 (where the layout server's installers look) that accepts
 * every connection and answers none until closed: a restore stays under way meanwhile. */
async function stallingIndex(): Promise<{ close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = http.createServer(() => undefined);
  server.on('connection', socket => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>(resolve => server.listen(8899, '127.0.0.1', resolve));
  return {
    close: async () => {
      sockets.forEach(socket => socket.destroy());
      await new Promise(resolve => server.close(resolve));
    }
  };
}

test.describe('The panel without a GPU (port 8892)', () => {
  test.use({ baseURL: 'http://localhost:8892' });

  test('no GPU', async ({ page }) => {
    await openPanel(page);
    await shutDownKernels(page);
    const panel = page.locator(PANEL);
    // The environment as a snapshot has just seen it, whatever earlier tests left.
    const env = panel.getByLabel('Environment');
    await expect(env.getByTestId('gpuws-env-summary')).not.toContainText('Reading', {
      timeout: 60000
    });
    await env.getByTestId('gpuws-env-snapshot').click();
    await expect(env.getByTestId('gpuws-env-summary')).toContainText('Matches the snapshot of', {
      timeout: 60000
    });
    // No GPU: its section comes after the others, right above the system's figures.
    const order = await panel
      .locator('section[data-section]')
      .evaluateAll(nodes => nodes.map(n => n.getAttribute('data-section')));
    expect(order.slice(-2)).toEqual(['gpus', 'system']);
    await expect(panel.getByTestId('gpuws-header-time')).toHaveText('no known end');
    // This server's store is encrypted, and its Sync section says with what.
    await expect(panel.getByTestId('gpuws-sync-encrypted')).toHaveText('encrypted (AES-256-GCM)');
    await checkBothThemes(page, 'no-gpu', async () => {
      await expect(panel.getByTestId('gpuws-sync-summary')).toContainText(
        /All saved|Nothing synced/,
        { timeout: 20000 }
      );
    });
  });

  test('a 40-minute runtime', async ({ page }) => {
    fs.writeFileSync(DEADLINE_FILE, `${Math.round(Date.now() / 1000 + 40 * 60 + 10)}\n`);
    try {
      await openPanel(page);
      const panel = page.locator(PANEL);
      await expect(panel.getByTestId('gpuws-header-time')).toHaveText(/^(40|39) min left$/, {
        timeout: 20000
      });
      await expect(panel.getByTestId('gpuws-countdown')).toContainText(/^(40|39):\d\d left/);
      await expect(panel.getByLabel('Runtime')).toContainText('deadline file');
      await expect(page.getByTestId('gpuws-status-runtime')).toHaveText(/^(40|39) min left$/);
      await checkBothThemes(page, 'runtime-40min', async () => {
        await expect(panel.getByTestId('gpuws-countdown')).toBeVisible();
      });
    } finally {
      fs.rmSync(DEADLINE_FILE, { force: true });
    }
    await expect(page.locator(PANEL).getByTestId('gpuws-header-time')).toHaveText('no known end', {
      timeout: 20000
    });
  });

  test('an environment restore under way', async ({ page }) => {
    const info = addPackage('slowpkg', '1.0');
    const index = await stallingIndex();
    try {
      await openPanel(page);
      const env = page.locator(PANEL).getByLabel('Environment');
      // The package seen first (it differs from the earlier snapshot), so the new snapshot has it.
      await expect(env.getByTestId('gpuws-env-summary')).toContainText(
        'Differs from the snapshot of',
        { timeout: 60000 }
      );
      await env.getByTestId('gpuws-env-snapshot').click();
      await expect(env.getByTestId('gpuws-env-summary')).toContainText('Matches the snapshot of', {
        timeout: 60000
      });
      fs.rmSync(info, { recursive: true, force: true }); // gone, as on a fresh machine
      await page.reload();
      await openPanel(page);
      await expect(env.getByTestId('gpuws-env-summary')).toContainText(
        'Differs from the snapshot of',
        { timeout: 60000 }
      );
      const restore = env.getByTestId('gpuws-env-restore');
      await expect(restore).toBeEnabled();
      await restore.click();
      await page.locator('.jp-Dialog').getByRole('button', { name: 'Restore' }).click();
      // The installer waits for the index: the restore stays under way.
      await expect(env.getByTestId('gpuws-env-progress')).toContainText('0 of 1 package', {
        timeout: 30000
      });
      await expect(env.getByTestId('gpuws-env-restore')).toHaveAttribute('aria-disabled', 'true');
      await expect(env.getByTestId('gpuws-env-restore')).toHaveAttribute('title', /running/);
      await checkBothThemes(page, 'env-restore', async () => {
        await expect(env.getByTestId('gpuws-env-progress')).toBeVisible();
      });
    } finally {
      await index.close();
    }
    await expect(
      page.locator(PANEL).getByLabel('Environment').getByTestId('gpuws-env-error')
    ).toContainText('Restore failed', { timeout: 120000 });
  });

  test('a persist under way', async ({ page }) => {
    await openPanel(page);
    const panel = page.locator(PANEL);
    const persist = panel.getByTestId('gpuws-persist');
    await expect(persist).toBeEnabled({ timeout: 20000 });
    // 320 MiB at the test server's 40 MiB/s cap: seconds of progress, enough for both themes.
    fs.writeFileSync(path.join(ROOT, 'layout-persist.bin'), Buffer.alloc(320 * 2 ** 20, 3));
    try {
      await persist.click();
      const progress = panel.getByTestId('gpuws-persist-progress');
      await expect(progress).toContainText(/MiB of 320 MiB/, { timeout: 20000 });
      await expect(panel.getByTestId('gpuws-header-sync')).toContainText(/^persisting/);
      await checkBothThemes(page, 'persist', async () => {
        await expect(progress).toContainText(/MiB of 320 MiB/);
      });
      await expect(panel.getByTestId('gpuws-persist-result')).toBeVisible({ timeout: 60000 });
      // In the store, ciphertext: the format's magic, then nothing of the file's bytes (all 3s).
      const stored = fs.readFileSync(path.join(STORE_FILES, 'layout-persist.bin'));
      expect(stored.subarray(0, 4).toString('latin1')).toEqual('GWSE');
      expect(stored.length).toBeGreaterThan(320 * 2 ** 20);
      expect(stored.subarray(4096, 8192).every(byte => byte === 3)).toBe(false);
    } finally {
      fs.rmSync(path.join(ROOT, 'layout-persist.bin'), { force: true });
    }
  });

  test("the header's ⋯ menu: its actions, why one is greyed out, and each one runs", async ({
    page
  }) => {
    await openPanel(page);
    const panel = page.locator(PANEL);
    await expect(panel.getByTestId('gpuws-persist')).toBeEnabled({ timeout: 20000 });
    await expect(
      panel.getByLabel('Environment').getByTestId('gpuws-env-summary')
    ).not.toContainText('Reading', {
      timeout: 60000
    });
    await panel.getByTestId('gpuws-more').click();
    const menu = page.locator('.jp-gpuws-menu');
    await expect(menu).toBeVisible();
    const items = menu.locator('.lm-Menu-item[data-type="command"]');
    await expect(items.locator('.lm-Menu-itemLabel')).toHaveText([
      'Persist and release…',
      'Snapshot now',
      'Take over…',
      'Settings…'
    ]);
    // Nothing to take over on a lone runtime: greyed out, and its tooltip says why.
    const takeOver = items.filter({ hasText: 'Take over' });
    await expect(takeOver).toHaveAttribute('aria-disabled', 'true');
    await expect(takeOver).toHaveAttribute('title', /Nothing to take over/);
    await expect(items.filter({ hasText: 'Snapshot now' })).toHaveAttribute(
      'title',
      /keep the environment/
    );
    // Snapshot now from the menu takes a snapshot.
    const snapshot = page.waitForRequest(
      r => r.url().includes('/gpuws/api/env/snapshots') && r.method() === 'POST'
    );
    await items.filter({ hasText: 'Snapshot now' }).click();
    await snapshot;
    await expect(menu).toBeHidden();
    await expect(panel.getByLabel('Environment').getByTestId('gpuws-env-summary')).toContainText(
      'Matches the snapshot of',
      { timeout: 60000 }
    );
    // Persist and release asks first; cancelling keeps the runtime.
    await panel.getByTestId('gpuws-more').click();
    await menu.locator('.lm-Menu-item').filter({ hasText: 'Persist and release' }).click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('Persist and release this runtime?');
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await expect(dialog).toHaveCount(0);
    // The header's Persist button persists, and says so while it runs.
    const persist = page.waitForRequest(
      r => r.url().includes('/gpuws/api/persist') && r.method() === 'POST'
    );
    await panel.getByTestId('gpuws-persist').click();
    await persist;
    await expect(panel.getByTestId('gpuws-persist-result')).toBeVisible({ timeout: 60000 });
  });

  test('a folded section stays folded after a reload', async ({ page }) => {
    await openPanel(page);
    const fold = page.locator(PANEL).getByTestId('gpuws-fold-checkpoints');
    await expect(fold).toHaveAttribute('aria-expanded', 'true');
    const saved = workspaceSaved(page, data =>
      JSON.stringify(data['jupyter_gpu_ws:panel'] ?? {}).includes('"checkpoints"')
    );
    await fold.click();
    await expect(fold).toHaveAttribute('aria-expanded', 'false');
    await expect(page.locator(PANEL).locator('#jp-gpuws-section-checkpoints')).toHaveCount(0);
    await expect(fold).toContainText('none'); // folded, it still says how it is
    await saved;
    await page.reload();
    await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
    await openPanel(page);
    const again = page.locator(PANEL).getByTestId('gpuws-fold-checkpoints');
    await expect(again).toHaveAttribute('aria-expanded', 'false');
    await expect(page.locator(PANEL).locator('#jp-gpuws-section-checkpoints')).toHaveCount(0);
    await again.click();
    await expect(page.locator(PANEL).locator('#jp-gpuws-section-checkpoints')).toHaveCount(1);
  });
});

test.describe('The panel with two simulated GPUs (port 8889)', () => {
  test.use({ baseURL: 'http://localhost:8889' });

  test('two GPUs', async ({ page }) => {
    await openPanel(page);
    await shutDownKernels(page);
    const panel = page.locator(PANEL);
    // GPUs first, right below the header.
    const order = await panel
      .locator('section[data-section]')
      .evaluateAll(nodes => nodes.map(n => n.getAttribute('data-section')));
    expect(order[0]).toEqual('gpus');
    await expect(panel.getByTestId('gpuws-gpu-card')).toHaveCount(2);
    // The status bar labels its figures and, the two GPUs being far apart, shows the busiest.
    await expect(page.getByTestId('gpuws-status')).toHaveText(
      /^GPU 0 \d+ % · 15\.0\/40 GiB \(busiest of 2\)$/
    );
    // A few samples in the sparklines (six: three seconds of the server's samples).
    await expect
      .poll(
        async () =>
          (
            (await panel.locator('.jp-gpuws-sparkline polyline').first().getAttribute('points')) ??
            ''
          )
            .split(' ')
            .filter(Boolean).length,
        { timeout: 20000 }
      )
      .toBeGreaterThanOrEqual(6);
    await checkBothThemes(page, 'gpus', async () => {
      await expect(panel.getByTestId('gpuws-gpu-card')).toHaveCount(2);
    });
    // The README's picture: the whole window, light theme, the GPU alerts' notifications hidden
    // (they come back with each sample over the threshold), and neither the test's folder name
    // (the Launcher's heading) nor this server's unreachable preemption watch (Runtime folded,
    // as a user would fold it; unfolded again after).
    await page.addStyleTag({
      content: '.Toastify { display: none !important; } .jp-Launcher-cwd { visibility: hidden; }'
    });
    const runtime = panel.getByTestId('gpuws-fold-runtime');
    await runtime.click();
    await expect(runtime).toHaveAttribute('aria-expanded', 'false');
    await page.screenshot({ path: picturePath('panel-gpus.png') });
    await runtime.click();
    await expect(runtime).toHaveAttribute('aria-expanded', 'true');
  });
});
