/**
 * Screenshots for the documentation: `GPUWS_SCREENSHOTS=1 jlpm playwright test screenshots`
 * writes docs/images/*.png. Skipped in the normal test run.
 */
import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const DOCS = path.join(__dirname, '..', '..', 'docs', 'images');

test.skip(!process.env.GPUWS_SCREENSHOTS, 'documentation screenshots only on request');
test.use({ viewport: { width: 1280, height: 800 } });

async function showPanel(page: any): Promise<void> {
  await page.evaluate(async () => {
    await (window as any).jupyterapp.commands.execute('gpuws:open-panel');
  });
  await expect(page.locator('#jp-gpuws-panel').getByTestId('gpuws-connection')).toHaveText('live');
  await page.waitForTimeout(12000); // let the sparklines fill a little
}

test.describe('with GPUs', () => {
  test.use({ baseURL: 'http://localhost:8889' });
  test('panel with GPUs', async ({ page }) => {
    await page.notebook.createNew();
    await page.notebook.setCell(
      0,
      'code',
      [
        'import json, os',
        "p = os.environ['GPUWS_UI_GPUS_FILE']",
        'spec = json.load(open(p))',
        "spec['gpus'][0]['processes'] = [{'pid': os.getpid(), 'memory_used': 14 * 2**30}]",
        "json.dump(spec, open(p + '.k', 'w')); os.replace(p + '.k', p)",
        '%load_ext jupyter_gpu_ws',
        'import torch, jupyter_gpu_ws as gpuws',
        'model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))',
        'opt = torch.optim.AdamW(model.parameters())',
        'gpuws.track(model=model, optimizer=opt)',
        'for i in range(120): opt.zero_grad(); model(torch.randn(8, 512)).sum().backward(); opt.step(); gpuws.step(i)',
        'gpuws.checkpoint(wait=True)'
      ].join('\n')
    );
    await page.notebook.run();
    await showPanel(page);
    await page.screenshot({ path: path.join(DOCS, 'panel-gpus.png') });
    await page.locator('#jp-gpuws-panel').screenshot({ path: path.join(DOCS, 'panel-gpus-sidebar.png') });
  });
});

test('panel without a GPU', async ({ page }) => {
  await showPanel(page);
  await page.locator('#jp-gpuws-panel').screenshot({ path: path.join(DOCS, 'panel-no-gpu.png') });
});
