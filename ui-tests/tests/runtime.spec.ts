/**
 * The Runtime section on a server with a 25-minute max_runtime (port 8889): a countdown that
 * goes down, a warning with a Persist now action, the time left in the status bar, and a
 * preemption watch whose metadata server is away.
 */
import { expect, test } from '@jupyterlab/galata';

const PANEL = '#jp-gpuws-panel';

test.use({ baseURL: 'http://localhost:8889', autoGoto: true });

function seconds(text: string): number {
  const parts = text
    .replace(/[^0-9:]/g, '')
    .split(':')
    .map(Number);
  return parts.reduce((total, part) => total * 60 + part, 0);
}

test.describe('Runtime', () => {
  test('the countdown shows and goes down', async ({ page }) => {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const countdown = page.locator(PANEL).getByTestId('gpuws-countdown');
    await expect(countdown).toContainText(/\d+:\d\d left/);
    const first = seconds((await countdown.textContent()) ?? '');
    expect(first).toBeGreaterThan(60);
    expect(first).toBeLessThanOrEqual(25 * 60);
    await expect
      .poll(async () => seconds((await countdown.textContent()) ?? ''), { timeout: 5000 })
      .toBeLessThan(first);
    await expect(page.locator(PANEL).getByLabel('Runtime')).toContainText('runtime limit');
    // Minutes away, or seconds where this server (a 25-minute runtime, started with the run)
    // has run long enough by the time this test comes.
    await expect(page.locator(PANEL).getByTestId('gpuws-next-persist')).toContainText(
      /Automatic persist in \d+ (min|s)\b/
    );
    await expect(page.getByTestId('gpuws-status-runtime')).toContainText(/\d+ min left/);
  });

  test('a preemption watch that cannot reach its metadata server says so', async ({ page }) => {
    await page.evaluate(async () => {
      await window.jupyterapp.commands.execute('gpuws:open-panel');
    });
    const runtime = page.locator(PANEL).getByLabel('Runtime');
    await expect(runtime.getByTestId('gpuws-preemption-watch')).toHaveText(
      'Watching for GCP preemption notices'
    );
    await expect(runtime.getByTestId('gpuws-preemption-error')).toContainText(
      'Cannot read GCP preemption notices: ',
      {
        timeout: 15000
      }
    );
  });

  test('a warning notification offers Persist now', async ({ page }) => {
    const toast = page.locator('.Toastify__toast', {
      hasText: /This runtime ends in about \d+ minutes/
    });
    await expect(toast).toHaveCount(1, { timeout: 15000 });
    await expect(toast.getByRole('button', { name: 'Persist now' })).toBeVisible();
  });
});
