/**
 * Training in view: a real tracked loop (PyTorch on the CPU) shows as a card at the top of the
 * panel with its step, ETA and verdict; the dashboard opens as a main-area tab with its curve.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const PANEL = '#jp-gpuws-panel';

/** Where a picture goes: docs/images/ with GPUWS_SCREENSHOTS=1, else beside the test's results. */
function picturePath(name: string): string {
  const docs = path.join(__dirname, '..', '..', 'docs', 'images');
  return process.env.GPUWS_SCREENSHOTS ? path.join(docs, name) : test.info().outputPath(name);
}

test.use({ viewport: { width: 1280, height: 800 } });

test('a tracked loop shows at the top of the panel, and its curve in the dashboard', async ({
  page
}) => {
  // Other tests (and earlier tries) leave tracked runs of Untitled notebooks behind: this run is
  // told apart by a total of its own.
  const total = 100000 + Math.floor(Math.random() * 800000);
  const totalText = total.toLocaleString('en-US');
  const name = (await page.notebook.createNew()) ?? '';
  await page.notebook.setCell(
    0,
    'code',
    [
      '%load_ext jupyter_gpu_ws',
      'import time, torch, jupyter_gpu_ws as gpuws',
      'model = torch.nn.Linear(64, 8)',
      'opt = torch.optim.Adam(model.parameters())',
      `gpuws.track(model=model, optimizer=opt, total_steps=${total})`,
      // The loop on one line: typed into the editor, an indented line can get the editor's own
      // indent on top of its spaces (an IndentationError, seen once in CI).
      'for i in range(300): opt.zero_grad(); loss = model(torch.randn(4, 64)).pow(2).mean(); ' +
        'loss.backward(); opt.step(); gpuws.step(i, loss=loss); time.sleep(0.02)'
    ].join('\n')
  );
  await page.notebook.run();
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const panel = page.locator(PANEL);
  const run = panel.getByTestId('gpuws-training-run').filter({ hasText: `/${totalText}` });
  await expect(run).toHaveCount(1, { timeout: 30000 });
  await expect(run.getByTestId('gpuws-training-progress')).toContainText(
    new RegExp(`step [\\d,]+/${totalText}`),
    { timeout: 30000 }
  );
  await expect(run.getByTestId('gpuws-training-verdict')).toContainText(
    /ETA |Finishes|Does not finish/,
    {
      timeout: 30000
    }
  );
  // The Training section comes first while a run is tracked.
  const first = panel.locator('[data-section]').first();
  await expect(first).toHaveAttribute('data-section', 'training');

  // The status bar carries a run, on the same line as its neighbours (JupyterLab's text item).
  const item = page.getByTestId('gpuws-status-training');
  await expect(item).toHaveText(/^step [\d,]+(\/[\d,]+)?/, { timeout: 30000 });
  const [own, neighbour] = [
    await item.boundingBox(),
    await page.getByTestId('gpuws-status').boundingBox()
  ];
  expect(own && neighbour).toBeTruthy();
  expect(Math.abs(own!.y - neighbour!.y)).toBeLessThanOrEqual(1);
  expect(Math.abs(own!.height - neighbour!.height)).toBeLessThanOrEqual(1);

  await page.screenshot({ path: picturePath('panel-training.png') });

  await panel.getByTestId('gpuws-open-dashboard').click();
  const dashboard = page.locator('#jp-gpuws-training-dashboard');
  await expect(dashboard.getByTestId('gpuws-dashboard')).toBeVisible({ timeout: 20000 });
  await expect(dashboard.getByTestId('gpuws-chart-loss').locator('canvas').first()).toBeVisible({
    timeout: 20000
  });
  await page.screenshot({ path: picturePath('dashboard-training.png') });

  // A NaN loss: one notification, with what to do and a way to the curves.
  await page.notebook.activate(name);
  await page.notebook.addCell('code', "gpuws.step(300, loss=torch.tensor(float('nan')))");
  await page.notebook.runCell(1);
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'the loss became nan' });
  await expect(toast).toHaveCount(1, { timeout: 30000 });
  await expect(toast).toContainText('Interrupt the loop');
  await expect(toast.getByText('Open Training and GPUs')).toBeVisible();
  await page.notebook.close(true);
});
