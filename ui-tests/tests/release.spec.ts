/**
 * Persist and release, on a server of its own (port 8890) since releasing stops it: a file
 * still waiting to be uploaded reaches the store with an environment snapshot, the panel says
 * the runtime was released, and the server is gone.
 */
import { expect, test } from '@jupyterlab/galata';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const PANEL = '#jp-gpuws-panel';
const SERVER = 'http://localhost:8890';
const ROOT = path.join(os.tmpdir(), 'gpuws-ui-release-root');
const STORE_BASE = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const STORE = path.join(STORE_BASE, 'gpuws-ui-release-store', 'ui-tests');

// The server is gone after the first try, so a retry could only fail for that reason; and
// Galata keeps its test folder on the server rather than delete it from a server that stopped.
test.describe.configure({ retries: 0 });
// Galata's trackers of kernels, sessions and terminals proxy the page's polls of them through the
// test runner: a poll in flight as the server stops failed the test with ECONNRESET. This test
// starts none of them; without the trackers the page's own polls meet the stopped server.
test.use({
  baseURL: SERVER,
  autoGoto: true,
  serverFiles: 'on',
  kernels: null,
  sessions: null,
  terminals: null
});

async function serverAnswers(): Promise<boolean> {
  try {
    await fetch(`${SERVER}/api/status`);
    return true;
  } catch {
    return false;
  }
}

test('Persist and release uploads pending work, shows the released view and stops the server', async ({
  page
}) => {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  const panel = page.locator(PANEL);
  const summary = panel.getByTestId('gpuws-sync-summary');
  await expect(summary).toContainText(/All saved|Nothing synced/, { timeout: 20000 });

  // Too large for an upload on the first write, and this server lets changes settle for
  // 10 minutes: only a persist uploads it.
  const bytes = crypto.randomBytes(5 * 2 ** 20);
  fs.writeFileSync(path.join(ROOT, 'results.bin'), bytes);
  await expect(summary).toHaveText(/^1 file, 5\.0 MiB pending$/, { timeout: 10000 });
  expect(fs.existsSync(path.join(STORE, 'files', 'results.bin'))).toBe(false);
  expect(fs.existsSync(path.join(STORE, '.gpuws', 'env', 'latest.json'))).toBe(false);

  // Persist and release is in the header's ⋯ menu.
  await panel.getByTestId('gpuws-more').click();
  const release = page
    .locator('.jp-gpuws-menu .lm-Menu-item')
    .filter({ hasText: 'Persist and release' });
  await expect(release).not.toHaveAttribute('aria-disabled', 'true');
  await release.click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Persist and release this runtime?');
  await dialog.getByRole('button', { name: 'Persist and release' }).click();

  await expect(panel.getByTestId('gpuws-released')).toContainText('This runtime was released', {
    timeout: 30000
  });
  await expect(panel.getByTestId('gpuws-more')).toHaveCount(0);
  // The status bar's last words: nothing pending any more, and the runtime released.
  await expect(page.getByTestId('gpuws-status-sync')).toHaveText('all synced');
  await expect(page.getByTestId('gpuws-status-runtime')).toHaveText('released');
  await expect(
    page.locator('.Toastify__toast', { hasText: 'Released: everything was persisted' })
  ).toHaveCount(1);
  expect(fs.readFileSync(path.join(STORE, 'files', 'results.bin')).equals(bytes)).toBe(true);
  // The release's persist also snapshots the environment.
  expect(fs.existsSync(path.join(STORE, '.gpuws', 'env', 'latest.json'))).toBe(true);
  await expect.poll(serverAnswers, { timeout: 30000 }).toBe(false);
});
