/**
 * The GPU Workspace panel as the specs open it: through its command, as the palette would.
 */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

/** The panel's element. */
export const PANEL = '#jp-gpuws-panel';

/** Open the panel and wait until it shows; with `width`, at that width (the usual is 250 px). */
export async function openPanel(page: IJupyterLabPageFixture, width?: number): Promise<void> {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:open-panel');
  });
  await expect(page.locator(PANEL)).toBeVisible();
  if (width !== undefined) {
    await page.sidebar.setWidth(width, 'left');
  }
}
