/**
 * The Checkpoints section with a real training notebook (PyTorch on the CPU).
 */
import { expect, test } from '@jupyterlab/galata';

const PANEL = '#jp-gpuws-panel';

test('lists a training notebook, and Checkpoint now updates it', async ({ page }) => {
  await page.notebook.createNew();
  await page.notebook.setCell(
    0,
    'code',
    [
      '%load_ext jupyter_gpu_ws',
      'import torch, jupyter_gpu_ws as gpuws',
      'model = torch.nn.Linear(64, 8)',
      'opt = torch.optim.Adam(model.parameters())',
      'gpuws.track(model=model, optimizer=opt)',
      // One line: typed into the editor, an indented line can get the editor's own indent too.
      'for i in range(5): opt.zero_grad(); model(torch.randn(4, 64)).sum().backward(); opt.step(); gpuws.step(i)'
    ].join('\n')
  );
  await page.notebook.run();
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const card = page.locator(PANEL).getByTestId('gpuws-checkpoint-kernel');
  await expect(card).toHaveCount(1, { timeout: 20000 });
  await expect(card).toContainText(/Untitled\d*\.ipynb/);
  await expect(card).toContainText('tracks model, optimizer');
  await expect(card.getByTestId('gpuws-checkpoint-last')).toHaveText('no checkpoint yet');
  await card.getByTestId('gpuws-checkpoint-now').click();
  await expect(card.getByTestId('gpuws-checkpoint-last')).toContainText(
    /^step 4 · \d+ s ago · [\d.]+ KiB/,
    {
      timeout: 20000
    }
  );
  // The sync carries it to the store: the section says so once it has.
  await expect(card.getByTestId('gpuws-checkpoint-last')).toHaveText(/ · in the store$/, {
    timeout: 30000
  });
  await expect(card.getByTestId('gpuws-checkpoint-now')).toBeEnabled();
  await page.notebook.close(true);
});

/** A plain tracked loop, run as a job: it checkpoints only when asked (or stopped). */
const JOB_SCRIPT = `import time
import jupyter_gpu_ws as gpuws
state = {"i": 0}
gpuws.track(state=state, every_steps=1000000)
for i in range(gpuws.resume(), 600):
    state["i"] = i
    gpuws.step(i)
    time.sleep(0.1)
`;

test("a job's run is the job's one process, with its newest checkpoint", async ({
  page,
  tmpPath
}, testInfo) => {
  const written = await page.request.put(`/api/contents/${tmpPath}/card-job.py`, {
    data: { type: 'file', format: 'text', content: JOB_SCRIPT }
  });
  expect(written.ok()).toBeTruthy();
  const answer = await page.request.post('/gpuws/api/jobs', {
    data: { command: ['python', 'card-job.py'], cwd: tmpPath, name: 'card-job' }
  });
  expect(answer.status(), await answer.text()).toBe(201);
  const created = await answer.json();
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const card = page
    .locator(PANEL)
    .getByTestId('gpuws-checkpoint-run')
    .filter({ hasText: 'job card-job' });
  const how = card.getByTestId('gpuws-checkpoint-run-how');
  const last = card.getByTestId('gpuws-checkpoint-last');
  // The job's, not torchrun's; its one process has no rank to list.
  await expect(how).toHaveText('job card-job · running', { timeout: 60000 });
  await expect(card.getByTestId('gpuws-checkpoint-ranks')).toHaveCount(0);
  await expect(last).toHaveText('no checkpoint yet');
  await card.getByTestId('gpuws-checkpoint-run-now').click();
  await expect(last).toContainText(/^step \d+ · \d+ s ago · [\d.]+ (B|KiB) · /, {
    timeout: 20000
  });
  await expect(last).toHaveText(/ · in the store$/, { timeout: 30000 });
  await card.screenshot({ path: testInfo.outputPath('job-run-card.png') });
  // Stopped (at a checkpoint), its run stays listed as the job's, not running, with that one.
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
  await expect(how).toHaveText('job card-job · not running', { timeout: 30000 });
  await expect(last).toContainText(/^step \d+ · \d+ s ago · /);
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
  await expect(card).toHaveCount(0, { timeout: 20000 });
});
