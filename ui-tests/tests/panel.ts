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

/**
 * The first save of the workspace (layout and state) that the server has answered and whose
 * data `holds`: a reload after it finds what was saved. (A request merely sent may be cut off
 * by the reload, and an earlier save holds the state before the change.)
 */
export function workspaceSaved(
  page: IJupyterLabPageFixture,
  holds: (data: Record<string, unknown>) => boolean
): Promise<unknown> {
  return page.waitForResponse(response => {
    const request = response.request();
    if (!request.url().includes('/api/workspaces') || request.method() !== 'PUT') {
      return false;
    }
    try {
      return response.ok() && holds(JSON.parse(request.postData() ?? '{}').data ?? {});
    } catch {
      return false;
    }
  });
}

/** Whether a saved layout has the panel open in its side area. */
export function panelOpenIn(data: Record<string, unknown>): boolean {
  const layout = data['layout-restorer:data'] as
    Record<string, { collapsed?: boolean; current?: string } | undefined> | undefined;
  return ['left', 'right'].some(side => {
    const area = layout?.[side];
    return !!area && area.collapsed === false && (area.current ?? '').includes('gpuws-panel');
  });
}
