/**
 * A newcomer's jobs, as docs/jobs.md tells them: a notebook and a Python script each run as a
 * job from the file browser, side by side, each in a run of its own; the server killed with
 * kill -9 and started again on the same machine; both jobs back, relaunched, each in its own
 * run from its own checkpoint. The server (port 8894, GPUWS_UI_TEST_JOBS in
 * jupyter_server_test_config.py) is this spec's own: it starts, kills and restarts it.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as http from 'http';
import * as os from 'os';
import * as path from 'path';
import { writeNotebook } from './notebooks';
import { openPanel, PANEL } from './panel';

const PORT = 8894;
const URL = `http://localhost:${PORT}`;
const LOG = path.join(os.tmpdir(), 'gpuws-ui-jobs-server.log');
// The same user's key on both starts: the records the first signed are the second's to run.
const KEY = 'ui-tests-newcomer-jobs-key-0123456789abcdef';

// A small CPU loop that resumes from its newest checkpoint and says where it resumed.
const LOOP = [
  'import time, torch, jupyter_gpu_ws as gpuws',
  'torch.manual_seed(0)',
  'model = torch.nn.Linear(4, 1)',
  'opt = torch.optim.SGD(model.parameters(), lr=0.01)',
  'gpuws.track(model=model, optimizer=opt, total_steps=100000, every_steps=10)',
  'start = gpuws.resume()',
  'print(f"resumed {start}", flush=True)',
  'for i in range(start, 100000):',
  '    loss = model(torch.randn(8, 4)).pow(2).mean()',
  '    opt.zero_grad(); loss.backward(); opt.step()',
  '    gpuws.step(i, loss=loss)',
  '    time.sleep(0.1)'
].join('\n');

let server: ChildProcess | null = null;

/** The spec's server, started (again: the same folders) and answering. */
async function startServer(again: boolean): Promise<void> {
  const log = fs.openSync(LOG, 'a');
  server = spawn(
    'jupyter',
    ['lab', '--config', 'jupyter_server_test_config.py', '--port', String(PORT)],
    {
      cwd: path.join(__dirname, '..'),
      env: {
        ...process.env,
        GPUWS_UI_TEST_JOBS: '1',
        GPUWS_UI_TEST_AGAIN: again ? '1' : '',
        GPUWS_JOB_KEY: KEY
      },
      detached: true, // a process group of its own: kill -9 takes the server and its kernels
      stdio: ['ignore', log, log]
    }
  );
  fs.closeSync(log);
  const deadline = Date.now() + 120000;
  while (!(await answers(`${URL}/gpuws/api/jobs`))) {
    if (Date.now() > deadline) {
      throw new Error(`the server did not start: ${fs.readFileSync(LOG, 'utf8').slice(-3000)}`);
    }
    await new Promise(resolve => setTimeout(resolve, 250));
  }
}

/** Whether the server answers this route (200): its extension is loaded and has read the store. */
function answers(url: string): Promise<boolean> {
  return new Promise(resolve => {
    const request = http.get(url, response => {
      response.resume();
      resolve(response.statusCode === 200);
    });
    request.on('error', () => resolve(false));
    request.setTimeout(5000, () => {
      request.destroy();
      resolve(false);
    });
  });
}

/** kill -9 to the server's process group; resolves once it has gone. */
async function killServer(): Promise<void> {
  const running = server;
  server = null;
  if (running?.pid === undefined || running.exitCode !== null) {
    return;
  }
  const gone = new Promise(resolve => running.once('exit', resolve));
  process.kill(-running.pid, 'SIGKILL');
  await gone;
}

test.use({
  baseURL: URL,
  // Galata's trackers proxy the page's polls of kernels, sessions and terminals to the server:
  // while it is killed, a proxied poll fails the test. Nothing here starts any of them.
  // (Playwright reads a fixture's needs from its first parameter: none here, an empty pattern.)
  // eslint-disable-next-line no-empty-pattern
  kernels: async ({}, use) => use(null),
  // eslint-disable-next-line no-empty-pattern
  sessions: async ({}, use) => use(null),
  // eslint-disable-next-line no-empty-pattern
  terminals: async ({}, use) => use(null)
});

test.beforeAll(async () => {
  fs.rmSync(LOG, { force: true });
  await startServer(false);
});

test.afterAll(async () => {
  await killServer();
});

interface IJob {
  id: string;
  name: string;
  run: string | null;
  state: string;
  step: number | null;
  attempts: Array<{ host: string; reason: string | null; step: number | null }>;
}

async function job(page: IJupyterLabPageFixture, id: string): Promise<IJob> {
  const answer = await page.request.get(`/gpuws/api/jobs/${id}`);
  expect(answer.status(), await answer.text()).toBe(200);
  return (await answer.json()) as IJob;
}

async function logOf(page: IJupyterLabPageFixture, id: string): Promise<string> {
  const answer = await page.request.get(`/gpuws/api/jobs/${id}/log?lines=200`);
  return ((await answer.json()).lines as string[]).join('\n');
}

/** Right-click the file, Run as job: the job the server started. */
async function runAsJob(page: IJupyterLabPageFixture, file: string): Promise<IJob> {
  // The panel shares the left side with the file browser: show the file browser.
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('filebrowser:activate');
  });
  await page.filebrowser.refresh();
  await page.locator('.jp-DirListing-item', { hasText: file }).click({ button: 'right' });
  const posted = page.waitForResponse(
    r => r.url().includes('/gpuws/api/jobs') && r.request().method() === 'POST'
  );
  await page.locator('.lm-Menu').getByText('Run as job', { exact: true }).click();
  const answer = await posted;
  expect(answer.status(), await answer.text()).toBe(201);
  return (await answer.json()) as IJob;
}

function card(page: IJupyterLabPageFixture, id: string) {
  return page.locator(PANEL).locator(`[data-testid="gpuws-job"][data-job="${id}"]`);
}

test('a notebook and a script run as jobs side by side come back in their own runs after the server is killed', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(300000);
  const written = await page.request.put(`/api/contents/${tmpPath}/train.py`, {
    data: { type: 'file', format: 'text', content: LOOP + '\n' }
  });
  expect(written.ok(), await written.text()).toBeTruthy();
  await writeNotebook(page, `${tmpPath}/train.ipynb`, [LOOP]);
  const notebook = await runAsJob(page, 'train.ipynb');
  const script = await runAsJob(page, 'train.py');
  await openPanel(page);
  // Each in a run of its own, named after its file and its id, never one shared "default".
  expect(notebook.run).toMatch(/^train\.ipynb-[0-9a-f]{4}$/);
  expect(script.run).toMatch(/^train\.py-[0-9a-f]{4}$/);
  for (const started of [notebook, script]) {
    await expect(card(page, started.id).getByTestId('gpuws-job-state')).toHaveText('running', {
      timeout: 60000
    });
    await expect(card(page, started.id).getByTestId('gpuws-job-run')).toHaveText(
      `run ${started.run}`
    );
  }
  // Both train past a checkpoint (every 10 steps) before the server is killed.
  for (const started of [notebook, script]) {
    await expect
      .poll(async () => (await job(page, started.id)).step ?? -1, { timeout: 120000 })
      .toBeGreaterThan(25);
  }

  await killServer();
  await startServer(true);
  // The page reloaded from the new server (its layout restored: the Launcher may be closed).
  await page.evaluate(() => window.location.reload());
  await page.waitForSelector('#jupyterlab-splash', { state: 'detached' });
  await page.waitForFunction(
    () => !!window.jupyterapp?.commands.hasCommand('gpuws:open-panel'),
    undefined,
    { timeout: 60000 }
  );
  await openPanel(page);

  for (const started of [notebook, script]) {
    const row = card(page, started.id);
    await expect(row.getByTestId('gpuws-job-state')).toHaveText('relaunched', {
      timeout: 120000
    });
    await expect(row.getByTestId('gpuws-job-run')).toContainText(`run ${started.run}`);
    // Its new attempt resumed its own run's checkpoint, not the other's and not from 0.
    await expect.poll(() => logOf(page, started.id), { timeout: 120000 }).toMatch(/resumed [1-9]/);
    const back = await job(page, started.id);
    expect(back.run).toBe(started.run);
    expect(back.attempts).toHaveLength(2);
    // The log holds both attempts: the first resumed nothing (0), the second its checkpoint.
    const said = [...(await logOf(page, started.id)).matchAll(/resumed (\d+)/g)];
    expect(said.map(m => Number(m[1]))[0]).toBe(0);
    const resumed = Number(said[said.length - 1][1]);
    expect(resumed).toBeGreaterThanOrEqual(10);
    expect(back.attempts[0].step ?? 0).toBeGreaterThanOrEqual(resumed - 10);
  }
  // Stopped, then forgotten: the server stops with the spec.
  for (const started of [notebook, script]) {
    await page.request.delete(`/gpuws/api/jobs/${started.id}`);
  }
});
