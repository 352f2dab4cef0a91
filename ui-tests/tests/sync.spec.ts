/**
 * The Sync section and Persist now, against a real server mirroring its root folder to a
 * local-folder store (see jupyter_server_test_config.py).
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { openPanel, PANEL } from './panel';

const ROOT = path.join(os.tmpdir(), 'gpuws-ui-root');
// The plain server's store is on another file system (see jupyter_server_test_config.py).
const STORE_BASE = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
const STORE = path.join(STORE_BASE, 'gpuws-ui-store', 'ui-tests', 'files');

test.describe('Sync', () => {
  test('shows a pending count after a file is written, then all saved', async ({ page }) => {
    await openPanel(page);
    const summary = page.locator(PANEL).getByTestId('gpuws-sync-summary');
    await expect(summary).toContainText(/All saved|Nothing synced/, { timeout: 20000 });
    // Larger than the few small files that go at once: it waits for the 4 s settle delay.
    fs.writeFileSync(path.join(ROOT, 'pending-check.bin'), Buffer.alloc(5 * 2 ** 20, 1));
    await expect(summary).toHaveText(/^1 file, 5\.0 MiB pending$/, { timeout: 10000 });
    await expect(page.getByTestId('gpuws-status-sync')).toHaveText('1 pending');
    // Once the change has settled, it is uploaded by itself.
    await expect(summary).toContainText('All saved', { timeout: 20000 });
    await expect(page.getByTestId('gpuws-status-sync')).toContainText(/^synced/);
    expect(fs.statSync(path.join(STORE, 'pending-check.bin')).size).toBe(5 * 2 ** 20);
  });

  test('names what the .gpuwsignore leaves out, as it changes', async ({ page }) => {
    await openPanel(page);
    const rules = page.locator(PANEL).getByTestId('gpuws-ignore-rules');
    const file = path.join(ROOT, '.gpuwsignore');
    // As one brought back by a restore would be: it leaves out the user's code and notebooks.
    fs.writeFileSync(file, '# scratch\n*.ipynb\n*.py\n');
    try {
      await expect(rules).toHaveText('Left out by .gpuwsignore: *.ipynb, *.py', {
        timeout: 20000
      });
    } finally {
      fs.rmSync(file);
    }
    await expect(rules).toHaveCount(0, { timeout: 20000 });
  });

  test('Persist now shows progress, then "all saved"', async ({ page }) => {
    await openPanel(page);
    const button = page.locator(PANEL).getByTestId('gpuws-persist');
    await expect(button).toBeEnabled({ timeout: 20000 });
    // 160 MiB at the test server's 40 MiB/s cap: a few seconds of visible progress.
    fs.writeFileSync(path.join(ROOT, 'checkpoint.bin'), Buffer.alloc(160 * 2 ** 20, 7));
    await button.click();
    // The header's icon button: greyed out while it runs, its tooltip saying so.
    await expect(button).toHaveAttribute('aria-disabled', 'true');
    await expect(button).toHaveAttribute('title', /^Persisting…/);
    const progress = page.locator(PANEL).getByTestId('gpuws-persist-progress');
    await expect(progress).toBeVisible();
    await expect(progress).toContainText(/MiB of 160 MiB/);
    await expect(
      page.locator('.Toastify__toast', { hasText: 'All saved: 1 file uploaded (160 MiB)' })
    ).toHaveCount(1, {
      timeout: 30000
    });
    await expect(page.locator(PANEL).getByTestId('gpuws-sync-summary')).toContainText('All saved');
    await expect(button).toHaveAttribute('title', /^Persist now:/);
    expect(fs.statSync(path.join(STORE, 'checkpoint.bin')).size).toBe(160 * 2 ** 20);
  });

  test('Persist now saves an open notebook with unsaved edits first', async ({ page, tmpPath }) => {
    const name = 'persist-unsaved.ipynb';
    await page.notebook.createNew(name);
    await page.notebook.setCell(0, 'code', "print('edited in the browser, never saved')");
    await page.notebook.runCell(0);
    const dirtyTab = page.locator('.lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-dirty', {
      hasText: name
    });
    await expect(dirtyTab).toHaveCount(1);
    const stored = path.join(STORE, tmpPath, name); // galata works in a folder of its own
    expect(fs.existsSync(stored) ? fs.readFileSync(stored, 'utf-8') : '').not.toContain(
      'never saved'
    );

    await openPanel(page);
    const button = page.locator(PANEL).getByTestId('gpuws-persist');
    await expect(button).toBeEnabled({ timeout: 20000 });
    await button.click();
    // What reached the store since the persist began: the notebook it saved, whether the flush
    // or the background sync (after the change settled) carried it.
    const summary = /All saved: 1 document saved, 1 file uploaded/;
    await expect(page.locator('.Toastify__toast', { hasText: summary })).toHaveCount(1, {
      timeout: 30000
    });

    await expect(dirtyTab).toHaveCount(0);
    // The store's copy has the edit and its output (nbformat may keep text as a list of lines).
    const cell = JSON.parse(fs.readFileSync(stored, 'utf-8')).cells[0];
    const text = (value: string | string[]) => ([] as string[]).concat(value).join('');
    expect(text(cell.source)).toBe("print('edited in the browser, never saved')");
    expect(text(cell.outputs[0].text)).toBe('edited in the browser, never saved\n');
    const result = page.locator(PANEL).getByTestId('gpuws-persist-result');
    await expect(result).toHaveText(
      /^Last persist \d+ s ago: All saved: 1 document saved, 1 file uploaded \([\d.]+ (B|KiB)\)\.$/
    );
    await page
      .locator(PANEL)
      .screenshot({ path: test.info().outputPath('panel-after-persist.png') });
    await page.notebook.close(true);
  });
});

test.describe('Sync, pending files', () => {
  test('the pending list opens with each file and why', async ({ page }) => {
    await openPanel(page);
    const summary = page.locator(PANEL).getByTestId('gpuws-sync-summary');
    await expect(summary).toContainText(/All saved|Nothing synced/, { timeout: 20000 });
    fs.writeFileSync(path.join(ROOT, 'listed-pending.bin'), Buffer.alloc(6 * 2 ** 20, 2));
    const toggle = page.locator(PANEL).getByTestId('gpuws-pending-toggle');
    await expect(toggle).toHaveText('Show the 1 pending file', { timeout: 10000 });
    await toggle.click();
    const list = page.locator(PANEL).getByTestId('gpuws-pending-list');
    await expect(list).toContainText('listed-pending.bin');
    await expect(list).toContainText(/waiting · 6\.0 MiB|uploading · 6\.0 MiB/);
    await page.locator(PANEL).screenshot({ path: test.info().outputPath('pending-list.png') });
    await expect(summary).toContainText('All saved', { timeout: 20000 });
    await expect(toggle).toHaveCount(0);
  });
});

test.describe('Sync, another runtime took the lease', () => {
  test('says who writes, counts down, takes over by itself once that one stops, then uploads what waited', async ({
    page
  }) => {
    await openPanel(page);
    const summary = page.locator(PANEL).getByTestId('gpuws-sync-summary');
    await expect(summary).toContainText(/All saved|Nothing synced/, { timeout: 20000 });
    // A runtime on another machine takes the lease over (as the panel's Take over does), then
    // dies: its lease stays as it was, and is free once this runtime has seen it unchanged for
    // its ttl (30 s), on this machine's clock.
    const lease = path.join(STORE_BASE, 'gpuws-ui-store', 'ui-tests', '.gpuws', 'lease.json');
    const now = Date.now() / 1000;
    const theirs = { holder: 'ui-test-other', host: 'spot-vm-2', pid: 4242, user: 'ana', ttl: 30 };
    fs.writeFileSync(
      `${lease}.ui-test`,
      JSON.stringify({ ...theirs, acquired: now, heartbeat: now, expires: now + 30 })
    );
    fs.renameSync(`${lease}.ui-test`, lease);

    const readOnly = page.locator(PANEL).getByTestId('gpuws-read-only');
    await expect(readOnly).toContainText('ana@spot-vm-2 (pid 4242) writes this workspace.', {
      timeout: 15000
    });
    await expect(page.getByTestId('gpuws-status-sync')).toHaveText('read-only');
    await expect(summary).toContainText('Read-only: ana@spot-vm-2 writes; taking over in');
    const left = async (): Promise<number> => {
      const found = /in (\d+) s if it renews no more/.exec(await readOnly.innerText());
      expect(found, await readOnly.innerText()).not.toBeNull();
      return Number(found![1]);
    };
    const first = await left();
    expect(first).toBeGreaterThan(2);
    expect(first).toBeLessThanOrEqual(30);
    await page.locator(PANEL).screenshot({ path: test.info().outputPath('read-only.png') });
    // A file written meanwhile waits: nothing is written to the store without the lease.
    fs.writeFileSync(
      path.join(ROOT, 'while-read-only.txt'),
      'written while another runtime held the lease\n'
    );
    // The server has it pending, and the countdown is live: once it has gone down by more than
    // the 4 s settle delay, a runtime that could write would have sent the file.
    await expect
      .poll(
        async () =>
          (await (await page.request.get('/gpuws/api/sync/pending')).json()).files.map(
            (f: { path: string }) => f.path
          ),
        { timeout: 15000 }
      )
      .toContain('while-read-only.txt');
    await expect.poll(left, { timeout: 15000 }).toBeLessThanOrEqual(first - 5);
    expect(fs.existsSync(path.join(STORE, 'while-read-only.txt'))).toBe(false);

    // Their lease runs out: this runtime takes over without a click and uploads what waited.
    await expect(readOnly).toHaveCount(0, { timeout: 40000 });
    await expect(summary).toContainText('All saved', { timeout: 30000 });
    expect(fs.readFileSync(path.join(STORE, 'while-read-only.txt'), 'utf8')).toBe(
      'written while another runtime held the lease\n'
    );
    const holder = JSON.parse(fs.readFileSync(lease, 'utf8'));
    expect(holder.host).not.toBe('spot-vm-2');
  });
});

test.describe('Sync, a store that vanishes', () => {
  test('says the store is unavailable while its folder is gone, then uploads what waited once it is back', async ({
    page
  }) => {
    await openPanel(page);
    const summary = page.locator(PANEL).getByTestId('gpuws-sync-summary');
    await expect(summary).toContainText(/All saved|Nothing synced/, { timeout: 30000 });
    const folder = path.join(STORE_BASE, 'gpuws-ui-store');
    const away = `${folder}.unmounted`;
    fs.renameSync(folder, away); // the drive drops
    try {
      fs.writeFileSync(path.join(ROOT, 'while-away.txt'), 'written while the drive was away\n');
      await expect(summary).toContainText('Store unavailable', { timeout: 20000 });
      await expect(page.getByTestId('gpuws-status-sync')).toHaveText('store down');
      await expect(page.locator(PANEL).getByTestId('gpuws-sync-error')).toContainText('is missing');
      await page
        .locator(PANEL)
        .screenshot({ path: test.info().outputPath('store-unavailable.png') });
      expect(fs.existsSync(folder)).toBe(false); // nothing made in its place
    } finally {
      fs.renameSync(away, folder); // the drive is back
    }
    await expect(summary).toContainText('All saved', { timeout: 40000 });
    expect(fs.readFileSync(path.join(STORE, 'while-away.txt'), 'utf8')).toBe(
      'written while the drive was away\n'
    );
  });
});

test.describe('Sync, a cancelled persist', () => {
  test('says "cancelling" while its step ends, then "cancelled"', async ({ page, tmpPath }) => {
    await page.notebook.createNew();
    // A training loop in a long step: the persist's checkpoint waits for its next step(),
    // which comes when the test writes this file (however long the steps below take).
    const nextStep = path.join(ROOT, tmpPath, 'next-step');
    const stepped = path.join(ROOT, tmpPath, 'stepped');
    await page.notebook.setCell(
      0,
      'code',
      [
        '%load_ext jupyter_gpu_ws',
        'import os, time, torch, jupyter_gpu_ws as gpuws',
        'model = torch.nn.Linear(8, 2)',
        'gpuws.track(model=model)',
        'gpuws.step(0)',
        `open(${JSON.stringify(stepped)}, 'w').close()`,
        `while not os.path.exists(${JSON.stringify(nextStep)}): time.sleep(0.05)`,
        'gpuws.step(1)'
      ].join('\n')
    );
    await page.evaluate(() => {
      void window.jupyterapp.commands.execute('notebook:run-cell');
    });
    await openPanel(page);
    await expect(page.locator(PANEL).getByTestId('gpuws-checkpoint-kernel')).toHaveCount(1, {
      timeout: 20000
    });
    // Its first step is done: a persist that began before it would be served by that step, and
    // would not wait (it failed so once, going from the documents straight to the environment).
    await expect.poll(() => fs.existsSync(stepped), { timeout: 20000 }).toBe(true);
    await page.locator(PANEL).getByTestId('gpuws-persist').click();
    await expect(page.locator(PANEL).getByTestId('gpuws-persist-progress')).toBeVisible({
      timeout: 10000
    });
    // Cancelled while it waits for the checkpoint, not while the page saves its documents first.
    await expect(page.locator(PANEL).getByTestId('gpuws-persist-activity')).toContainText(
      'Checkpointing 1 kernel',
      {
        timeout: 10000
      }
    );

    const cancel = page.locator(PANEL).getByTestId('gpuws-persist-cancel');
    await cancel.click();
    const cancelling = page.locator(PANEL).getByTestId('gpuws-persist-cancelling');
    await expect(cancelling).toContainText(
      'Cancelling: the persist stops after its current step (the tracked notebooks’ checkpoints).'
    );
    await expect(page.getByTestId('gpuws-status-sync')).toHaveText('cancelling');
    // Not "All saved" while the checkpoint the persist waits for is still to come.
    await expect(page.locator(PANEL).getByTestId('gpuws-sync-summary')).toHaveText(
      'Cancelling the persist…'
    );
    await expect(cancel).toHaveAttribute('aria-disabled', 'true');
    await expect(page.locator(PANEL).getByTestId('gpuws-persist-progress')).toHaveCount(0);
    await page.locator(PANEL).screenshot({ path: test.info().outputPath('cancelling.png') });

    // The loop's next step saves the checkpoint; then the persist stops, its sync skipped.
    fs.writeFileSync(nextStep, '');
    await expect(page.locator('.Toastify__toast', { hasText: 'Persist cancelled' })).toHaveCount(
      1,
      {
        timeout: 30000
      }
    );
    await expect(cancelling).toHaveCount(0);
    await expect(cancel).toHaveCount(0);
    await expect(page.getByTestId('gpuws-status-sync')).not.toHaveText('cancelling');
    await page.notebook.close(true);
  });
});
