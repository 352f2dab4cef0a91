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
  await expect(card.getByTestId('gpuws-checkpoint-last')).toContainText('in the store', {
    timeout: 30000
  });
  await expect(card.getByTestId('gpuws-checkpoint-now')).toBeEnabled();
  await page.notebook.close(true);
});
