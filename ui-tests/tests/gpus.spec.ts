/**
 * The panel on a server reading simulated GPUs through the NVML test double
 * (jupyter_server_test_config.py with GPUWS_UI_TEST_GPUS=1, on port 8889).
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const PANEL = '#jp-gpuws-panel';
const GPUS_FILE = process.env.GPUWS_UI_GPUS_FILE || path.join(os.tmpdir(), 'gpuws-ui-gpus.json');
const ORIGINAL = fs.readFileSync(path.join(__dirname, '..', 'fake-gpus.json'), 'utf-8');

/** The NVML test double's GPUs, as fake-gpus.json gives them (the fields a test changes). */
interface IFakeGpus {
  gpus: Array<{ memory_used: number; [field: string]: unknown }>;
}

function writeGpus(change: (spec: IFakeGpus) => void): void {
  const spec: IFakeGpus = JSON.parse(ORIGINAL);
  change(spec);
  fs.writeFileSync(GPUS_FILE + '.tmp', JSON.stringify(spec));
  fs.renameSync(GPUS_FILE + '.tmp', GPUS_FILE);
}

test.use({ baseURL: 'http://localhost:8889', autoGoto: true });

test.describe('GPU Workspace panel with GPUs', () => {
  test.beforeEach(() => writeGpus(() => undefined));
  test.afterAll(() => writeGpus(() => undefined));

  test('shows one card per GPU with its figures', async ({ page }) => {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const cards = page.locator(PANEL).getByTestId('gpuws-gpu-card');
    await expect(cards).toHaveCount(2);
    const first = cards.nth(0);
    await expect(first).toContainText('GPU 0');
    await expect(first).toContainText('A100-SXM4-40GB');
    await expect(first.locator('.jp-gpuws-card-title')).toHaveAttribute(
      'title',
      /NVIDIA A100-SXM4-40GB/
    );
    await expect(first.getByTestId('gpuws-gpu-memory')).toContainText('15.0/40 GiB');
    await expect(first.getByTestId('gpuws-gpu-util')).toContainText(/\d+ %/);
    await expect(first).toContainText('63 °C · 287 / 400 W · 1410 MHz');
    await expect(first.locator('svg.jp-gpuws-sparkline polyline').first()).toHaveAttribute(
      'points',
      /\d+(\.\d+)?,\d+(\.\d+)? \d/
    );
    await expect(cards.nth(1)).toContainText('MIG 0: 1.0/9.5 GiB');
    await expect(page.locator(PANEL).getByTestId('gpuws-no-gpu')).toHaveCount(0);
    await expect(page.getByTestId('gpuws-status')).toHaveText(
      /^GPU 0 \d+ % · 15\.0\/40 GiB \(busiest of 2\)$/
    );
  });

  test('names the notebook whose kernel holds GPU memory', async ({ page, request }) => {
    await page.notebook.createNew();
    // The kernel adds its own PID to the simulated GPU, as CUDA would on a real one.
    await page.notebook.setCell(
      0,
      'code',
      [
        'import json, os',
        "p = os.environ['GPUWS_UI_GPUS_FILE']",
        'spec = json.load(open(p))',
        "spec['gpus'][0]['processes'] = [{'pid': os.getpid(), 'memory_used': 3 * 2**30}]",
        "json.dump(spec, open(p + '.k', 'w')); os.replace(p + '.k', p)"
      ].join('\n')
    );
    await page.notebook.run();
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const sessions = await (await request.get('/api/sessions')).json();
    const notebook: string = sessions.find((s: { type: string }) => s.type === 'notebook').path;
    const name = notebook.split('/').pop() as string;
    expect(name).toMatch(/\.ipynb$/);
    const process = page.locator(PANEL).getByTestId('gpuws-gpu-process').first();
    await expect(process).toContainText(name, { timeout: 20000 });
    await expect(process).toContainText('3.0 GiB');
    await page.notebook.close(true);
  });

  test('notifies once when GPU memory is nearly full', async ({ page }) => {
    writeGpus(spec => {
      spec.gpus[0].memory_used = 41875931136; // 97.5 %
    });
    const toast = page.locator('.Toastify__toast', {
      hasText: 'GPU 0 (NVIDIA A100-SXM4-40GB) memory is 98% full'
    });
    await expect(toast).toHaveCount(1, { timeout: 20000 });
    // Four more samples of the same episode (the sampler's, which the page is sent as they come).
    const since = Date.now() / 1000;
    await expect
      .poll(
        async () =>
          (await (await page.request.get(`/gpuws/api/metrics?since=${since}`)).json()).history
            .length,
        { timeout: 20000 }
      )
      .toBeGreaterThanOrEqual(4);
    await expect(toast).toHaveCount(1);
  });
});

test.describe("A store on the work directory's own disk", () => {
  test('is never called "all saved": the panel says where it is and what to set', async ({
    page
  }) => {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const summary = page.locator(PANEL).getByTestId('gpuws-sync-summary');
    await expect(summary).toContainText("Copied to this machine's disk", { timeout: 30000 });
    await expect(summary).not.toContainText('All saved');
    await expect(page.locator(PANEL).getByTestId('gpuws-local-store')).toContainText('GPUWS_STORE');
    await expect(page.getByTestId('gpuws-status-sync')).toHaveText('local store only');
  });
});
