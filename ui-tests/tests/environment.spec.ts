/**
 * The Environment section against the server's own small environment
 * (<tmp>/gpuws-ui-env, made by jupyter_server_test_config.py): Snapshot now, then a package
 * installed behind its back shows as a difference.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const PANEL = '#jp-gpuws-panel';
const ENV = path.join(os.tmpdir(), 'gpuws-ui-env');

function sitePackages(): string {
  const lib = path.join(ENV, 'lib');
  const python = fs.readdirSync(lib).find(name => name.startsWith('python'))!;
  return path.join(lib, python, 'site-packages');
}

test.describe('Environment', () => {
  test.afterAll(() => {
    fs.rmSync(path.join(sitePackages(), 'demo_pkg-1.0.dist-info'), {
      recursive: true,
      force: true
    });
  });

  test('Snapshot now, then a change shows as a difference', async ({ page }) => {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const section = page.locator(PANEL).getByLabel('Environment');
    const summary = section.getByTestId('gpuws-env-summary');
    await expect(summary).not.toContainText('Reading', { timeout: 30000 });
    await section.getByTestId('gpuws-env-snapshot').click();
    await expect(summary).toContainText('Matches the snapshot of', { timeout: 60000 });
    await expect(section.getByTestId('gpuws-env-restore')).toHaveAttribute('aria-disabled', 'true');

    // What `pip install demo-pkg==1.0` leaves behind, written directly.
    const info = path.join(sitePackages(), 'demo_pkg-1.0.dist-info');
    fs.mkdirSync(info, { recursive: true });
    fs.writeFileSync(
      path.join(info, 'METADATA'),
      'Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n'
    );
    fs.writeFileSync(path.join(info, 'INSTALLER'), 'pip\n');
    await page.reload();
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    await expect(summary).toContainText('Differs from the snapshot of', { timeout: 60000 });
    await expect(section.getByTestId('gpuws-env-diff')).toContainText('+ demo-pkg 1.0');
  });
});
