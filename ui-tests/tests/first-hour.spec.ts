/**
 * The README's first hour, walked in Chromium on a newcomer's server (port 8893: nothing tracked
 * yet, a store on another disk): the Training section's copied snippet, `%load_ext`, a tracked
 * loop of plain values and one of a small torch model, Persist now, Restart and Run All, resume.
 * At each step the panel, the `%gpuws status` of the notebook and the status bar say the same
 * thing, and nothing raises an error or warning notification or an anomaly.
 *
 * The notebooks are written through the contents API and their cells hold one-line loops: text
 * typed into the editor can get the editor's own indent on top of its spaces (see git log,
 * "training.spec.ts:18 was flaky"). The snippet goes in as a user puts it there: pasted.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

import { openNotebook, shutDownKernels, writeNotebook } from './notebooks';

const PANEL = '#jp-gpuws-panel';

test.use({
  baseURL: 'http://localhost:8893',
  viewport: { width: 1280, height: 800 },
  permissions: ['clipboard-read', 'clipboard-write'],
  // Galata's record of the kernels a test starts stands between the page and a kernel restart
  // (the page waits on "Starting" for ever): the page talks to the server directly instead.
  kernels: null,
  sessions: null
});
// One walk through a fresh server: a second try would find the first one's runs.
test.describe.configure({ retries: 0 });

/** README steps 3 and 4, plain values: the Training section's snippet pasted into the empty first
 * cell, as it is (README step 4, ~20 s), then the magic's status. */
const PLAIN = [
  '', // the Training section's snippet, pasted
  // The server reads the kernels' streams every second: the table then has the loop's last step.
  'time.sleep(2.5)\n%gpuws status'
];

/** README step 4, a small torch model: a noisy linear fit whose loss falls to the noise. */
const MODEL = [
  '%load_ext jupyter_gpu_ws',
  'import time, torch, jupyter_gpu_ws as gpuws\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(8, 1)\n' +
    'opt = torch.optim.SGD(model.parameters(), lr=0.05)\ngpuws.track(model=model, optimizer=opt, total_steps=200)\n' +
    'start = gpuws.resume()',
  'for i in range(start, min(start + 100, 200)): x = torch.randn(16, 8); ' +
    'loss = (model(x) - x.sum(1, keepdim=True) - 0.1 * torch.randn(16, 1)).pow(2).mean(); ' +
    'opt.zero_grad(); loss.backward(); opt.step(); gpuws.step(i, loss=loss); time.sleep(0.01)',
  'print(f"at step {i + 1}")',
  'time.sleep(2.5)\n%gpuws status'
];

/** The text of a cell's outputs in the open notebook. */
function output(page: IJupyterLabPageFixture, cell: number): Locator {
  return page
    .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')
    .nth(cell)
    .locator('.jp-OutputArea');
}

/** No error or warning notification has shown, and no run has an open anomaly (soft: the walk
 * goes on, and the test lists every alarm it met). */
async function nothingAlarming(page: IJupyterLabPageFixture): Promise<void> {
  const alarms = page.locator('.Toastify__toast--error, .Toastify__toast--warning');
  expect.soft(await alarms.allInnerTexts()).toEqual([]);
  await expect.soft(page.locator(PANEL).locator('.jp-gpuws-anomaly')).toHaveCount(0);
}

/** The run's card in the panel's Training section. */
function card(page: IJupyterLabPageFixture, notebook: string): Locator {
  return page.locator(PANEL).getByTestId('gpuws-training-run').filter({ hasText: notebook });
}

/** Restart the kernel and run every cell, as Kernel → Restart Kernel and Run All Cells does. */
async function restartAndRunAll(page: IJupyterLabPageFixture, name: string): Promise<void> {
  await page.notebook.activate(name);
  void page.evaluate(async () => {
    await window.jupyterapp.commands.execute('notebook:restart-run-all');
  });
  await page.locator('.jp-Dialog .jp-mod-accept').click();
}

test.afterEach(async ({ page }) => {
  await shutDownKernels(page, ['plain.ipynb', 'model.ipynb']);
});

test('the README first hour: snippet, tracked loops, Persist now, Restart and Run All, resume', async ({
  page
}) => {
  test.setTimeout(300000);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const panel = page.locator(PANEL);

  // The Training section's Copy snippet: README step 4 as written, %load_ext first, every name
  // it uses defined in it.
  await panel.getByTestId('gpuws-training-empty').getByTestId('gpuws-copy-snippet').click();
  const snippet = await page.evaluate(() => navigator.clipboard.readText());
  expect(snippet.split('\n')[0]).toBe('%load_ext jupyter_gpu_ws');
  for (const call of ['gpuws.track(', 'gpuws.resume()', 'gpuws.step(i, loss=loss)']) {
    expect(snippet).toContain(call);
  }

  // Plain values: the notebook, the snippet pasted into its empty first cell, run as it is.
  await writeNotebook(page, 'plain.ipynb', PLAIN);
  await writeNotebook(page, 'model.ipynb', MODEL);
  await openNotebook(page, 'plain.ipynb');
  await page.notebook.enterCellEditingMode(0);
  await page.keyboard.press('Control+V');
  expect(await page.notebook.getCellTextInput(0)).toBe(snippet);
  await page.notebook.leaveCellEditingMode(0);
  void page.notebook.run();
  // While it runs, its progress shows, as README step 4 says: the step, the pace and the ETA,
  // in the Training section and in the status bar.
  const plainProgress = card(page, 'plain.ipynb').getByTestId('gpuws-training-progress');
  await expect(plainProgress).toContainText(/step \d+\/200\s*[\d.]+\/s/, { timeout: 20000 });
  // With no known end of the runtime, the verdict says the ETA ("ETA 15 s; this runtime has no deadline").
  await expect(card(page, 'plain.ipynb').getByTestId('gpuws-training-verdict')).toContainText(
    /ETA \d+ s/
  );
  await expect(page.getByTestId('gpuws-status-training')).toContainText(/step \d+\/200 · ETA/);
  await expect(output(page, 0)).toContainText('starting from 0');
  await expect(card(page, 'plain.ipynb').getByTestId('gpuws-training-verdict')).toContainText(
    'All 200 steps done',
    { timeout: 60000 }
  );
  await expect(output(page, 1)).toContainText(/plain\.ipynb\D*200\/200/, { timeout: 30000 });
  await nothingAlarming(page);

  // A small torch model, in a notebook of its own.
  await openNotebook(page, 'model.ipynb');
  await page.notebook.run();
  await expect(output(page, 3)).toContainText('at step 100');
  await expect(card(page, 'model.ipynb').getByTestId('gpuws-training-progress')).toContainText(
    'step 100/200',
    {
      timeout: 20000
    }
  );
  await expect(output(page, 4)).toContainText(/model\.ipynb\D*100\/200/);
  await nothingAlarming(page);

  // Persist now: every tracked notebook checkpoints, everything is uploaded; the panel, the
  // status bar and the magic say it is saved.
  await page.locator(PANEL).getByTestId('gpuws-persist').click();
  const sync = panel.getByTestId('gpuws-sync-summary');
  await expect(panel.getByTestId('gpuws-persist-result')).toBeVisible({ timeout: 120000 });
  await expect(sync).toContainText('All saved', { timeout: 30000 });
  await expect(page.getByTestId('gpuws-status-sync')).toHaveText(/^synced /);
  await page.notebook.runCell(4);
  await expect(output(page, 4)).toContainText(/Sync\W+synced /);
  await expect(output(page, 4)).toContainText(
    /model\.ipynb\s*model, optimizer\s*99\s*[\d.]+ [KMG]?i?B.*?in the store/
  ); // checkpoint: last step
  await nothingAlarming(page);

  // Restart and Run All: resume() continues from the checkpoint, the loops finish, no alarm
  // (the rerun from step 0 is a new segment, not a divergence from the last run's best).
  for (const [name, resumeOutput, loopOutput, status, from] of [
    ['plain.ipynb', 0, 0, 1, 'goes on from step 200'],
    ['model.ipynb', 1, 3, 4, 'goes on from step 100']
  ] as Array<[string, number, number, number, string]>) {
    await restartAndRunAll(page, name);
    // resume() says where it continues: the plain run had ended, the model's at step 100.
    await expect(output(page, resumeOutput)).toContainText(from, { timeout: 120000 });
    if (loopOutput !== resumeOutput) {
      await expect(output(page, loopOutput)).toContainText('at step 200', { timeout: 120000 });
    }
    await expect(output(page, status)).toContainText(/done\s*200\/200/, { timeout: 30000 });
    const run = card(page, name);
    await expect(run.getByTestId('gpuws-training-verdict')).toContainText('All 200 steps done', {
      timeout: 20000
    });
    await expect(run.getByTestId('gpuws-training-progress')).not.toContainText('ETA');
    // The status bar speaks of runs still going, never of a finished one.
    await expect(
      page.getByTestId('gpuws-status-training').filter({ hasText: '200/200' })
    ).toHaveCount(0);
    await nothingAlarming(page);
  }
  await expect(output(page, 4)).not.toContainText('ETA 0');
  await nothingAlarming(page);
});
