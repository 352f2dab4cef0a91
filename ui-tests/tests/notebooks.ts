/**
 * Notebooks for the browser tests, made as files and opened as a user opens them: written
 * through the contents API (cells exactly as given: nothing typed into an editor, whose own
 * indent can land on top of a line's spaces), then opened by path, whatever the left sidebar shows.
 */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';

/** Write a notebook of code cells at `name` (relative to the server's root). */
export async function writeNotebook(
  page: IJupyterLabPageFixture,
  name: string,
  cells: string[]
): Promise<void> {
  const content = {
    cells: cells.map(source => ({
      cell_type: 'code',
      source,
      metadata: {},
      outputs: [],
      execution_count: null
    })),
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    nbformat: 4,
    nbformat_minor: 5
  };
  const response = await page.request.put(`/api/contents/${name}`, {
    data: { type: 'notebook', format: 'json', content }
  });
  expect(response.ok()).toBeTruthy();
}

/** Open a notebook by its path and make it the current tab, its kernel started. */
export async function openNotebook(page: IJupyterLabPageFixture, name: string): Promise<void> {
  await page.evaluate(async path => {
    await window.jupyterapp.commands.execute('docmanager:open', {
      path,
      factory: 'Notebook'
    });
  }, name);
  await expect.poll(() => page.notebook.isOpen(name), { timeout: 30000 }).toBe(true);
  await page.notebook.activate(name);
  await expect(page.locator('#jp-main-statusbar')).toContainText('Idle', { timeout: 60000 });
}

/** Shut down the kernels of these notebooks (with Galata's record of kernels off, as in the
 * specs that restart one, nothing else does; a kernel left running is one more tracked notebook
 * in the next test's panel and persist). */
export async function shutDownKernels(
  page: IJupyterLabPageFixture,
  names: string[]
): Promise<void> {
  const sessions: Array<{ id: string; path: string }> = await (
    await page.request.get('/api/sessions')
  ).json();
  for (const session of sessions.filter(s =>
    names.some(name => s.path === name || s.path.endsWith(`/${name}`))
  )) {
    await page.request.delete(`/api/sessions/${session.id}`);
  }
}
