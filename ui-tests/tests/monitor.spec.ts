/**
 * The GPU Workspace panel on this machine as it is: no GPU, live system figures.
 */
import { expect, test } from '@jupyterlab/galata';
import { openPanel, PANEL, panelOpenIn, workspaceSaved } from './panel';

test.describe('GPU Workspace panel without a GPU', () => {
  test('opens from the palette command and shows live system figures from the server', async ({
    page,
    request
  }) => {
    await openPanel(page);
    const panel = page.locator(PANEL);
    await expect(panel.getByTestId('gpuws-connection')).toHaveAttribute('data-state', 'live');

    const response = await request.get('/gpuws/api/metrics');
    expect(response.ok()).toBeTruthy();
    const metrics = await response.json();
    const totalGiB = (metrics.system.memory_total / 2 ** 30).toFixed(1);
    await expect(panel.getByTestId('gpuws-memory')).toContainText(
      `/${totalGiB.replace(/\.0$/, '')} GiB`
    );
    await expect(panel.getByTestId('gpuws-cpu')).toContainText(
      `CPU (${metrics.system.cpu_count} cores)`
    );
    await expect(panel.getByTestId('gpuws-cpu')).toContainText(/\d+ %/);
    await expect(panel.getByTestId('gpuws-disk-workdir')).toContainText(
      /Disk \(work dir\)\s*[\d.]+\/[\d.]+ GiB/
    );

    // Live: the memory meter's value is re-rendered from new samples.
    const meter = panel.getByTestId('gpuws-memory').locator('[role=meter]');
    await expect(meter).toHaveAttribute('aria-valuenow', /\d+/);
  });

  test('has a palette command that opens the panel', async ({ page }) => {
    await page.keyboard.press('Control+Shift+C');
    const palette = page.locator('#command-palette');
    await palette.locator('.lm-CommandPalette-input').fill('GPU Workspace');
    await palette
      .locator('.lm-CommandPalette-item', { hasText: 'Open GPU Workspace panel' })
      .click();
    await expect(page.locator(PANEL)).toBeVisible();
  });

  test('says plainly that no GPU was found', async ({ page }) => {
    await openPanel(page);
    const message = page.locator(PANEL).getByTestId('gpuws-no-gpu');
    await expect(message).toContainText('No GPU found.');
    await expect(message).toContainText('No NVIDIA driver is installed');
    await expect(page.locator(PANEL).getByTestId('gpuws-gpu-card')).toHaveCount(0);
  });

  test('shows a status-bar item', async ({ page }) => {
    await expect(page.getByTestId('gpuws-status')).toHaveText('No GPU');
    await page.getByTestId('gpuws-status').click();
    await expect(page.locator(PANEL)).toBeVisible();
  });

  test('is restored after a reload', async ({ page }) => {
    const saved = workspaceSaved(page, panelOpenIn);
    await openPanel(page);
    await saved; // the layout, with the panel open, reached the workspace store
    await page.reload();
    await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
    await expect(page.locator(PANEL)).toBeVisible();
    await expect(page.locator(PANEL).getByTestId('gpuws-connection')).toHaveAttribute(
      'data-state',
      'live'
    );
  });
});
