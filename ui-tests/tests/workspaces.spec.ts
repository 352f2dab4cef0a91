/**
 * A fresh machine (port 8891, jupyter_server_test_config.py with GPUWS_UI_TEST_FRESH=1): its
 * workspace, named by default, is new and empty, while the store holds the user's work under
 * another name. The Sync section lists that workspace, and using it brings the files back.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const PANEL = '#jp-gpuws-panel';
const ROOT = path.join(os.tmpdir(), 'gpuws-ui-fresh-root');

test.use({ baseURL: 'http://localhost:8891', autoGoto: true });

test("a new workspace shows the store's others, and one can be used", async ({ page }) => {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const chooser = page.locator(PANEL).getByTestId('gpuws-workspace-chooser');
  await expect(chooser).toBeVisible({ timeout: 30000 });
  await expect(chooser).toContainText('is new');
  await expect(chooser).toContainText(/someone-project\s*1 file, 27 B/);
  await page.locator(PANEL).screenshot({ path: test.info().outputPath('workspace-chooser.png') });
  await chooser.getByRole('button', { name: 'Use' }).click();
  await page.getByRole('button', { name: 'Use it' }).click();
  await expect(chooser).toHaveCount(0, { timeout: 30000 });
  await expect
    .poll(() => fs.existsSync(path.join(ROOT, 'notes-from-yesterday.md')), { timeout: 30000 })
    .toBe(true);
  await expect(page.locator(PANEL).getByTestId('gpuws-sync-summary')).toContainText(
    /All saved|Nothing synced/,
    {
      timeout: 30000
    }
  );
  await expect(page.locator(PANEL).locator('.jp-gpuws-store')).toHaveAttribute(
    'title',
    /someone-project$/
  );
});
