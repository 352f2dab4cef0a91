/**
 * The panel's Jobs section and "Run as job", against answers in the REST API's shape (the jobs
 * routes of this page are answered by the test, the rest of the panel by the real server): every
 * state of a job renders with its words and colour, each button calls its endpoint with its
 * method, an API error shows the server's message, and "Run as job" in the file browser's context
 * menu and the palette posts the notebook and names the job. The section's pictures in both themes
 * go to docs/images/ with GPUWS_SCREENSHOTS=1.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Request, Response, Route } from '@playwright/test';
import * as path from 'path';

import { writeNotebook } from './notebooks';
import { openPanel, PANEL } from './panel';

const NOW = Math.round(Date.now() / 1000);

/** Where a picture goes: docs/images/ with GPUWS_SCREENSHOTS=1, else beside the test's results. */
function picturePath(name: string): string {
  const docs = path.join(__dirname, '..', '..', 'docs', 'images');
  return process.env.GPUWS_SCREENSHOTS ? path.join(docs, name) : test.info().outputPath(name);
}

test.use({ viewport: { width: 1280, height: 800 } });

/** A job as GET /gpuws/api/jobs answers it, with `fields` over a finished script's defaults. */
function job(fields: { [name: string]: unknown }): { [name: string]: unknown } {
  return {
    id: 'j-000000',
    name: 'train',
    kind: 'command',
    command: ['python', 'train.py'],
    notebook: null,
    output: null,
    cwd: '',
    gpus: null,
    retries: 0,
    state: 'finished',
    reason: null,
    attempts: [],
    run: null,
    step: null,
    total_steps: null,
    eta_seconds: null,
    verdict: null,
    log_tail: [],
    relaunch: null,
    needs_approval: false,
    approval: null,
    created: NOW - 3600,
    updated: NOW - 60,
    ...fields
  };
}

const LOG = Array.from(
  { length: 8 },
  (_, i) => `step ${4000 + 20 * i} loss ${(0.5 - i / 100).toFixed(3)}`
);

/** One job in each state the section shows. */
const JOBS = [
  job({
    id: 'j-run',
    name: 'train',
    state: 'running',
    command: ['python', 'train.py', '--lr', '0.1'],
    run: 'train.py',
    step: 4120,
    total_steps: 10000,
    eta_seconds: 812,
    verdict: 'finishes before the deadline',
    log_tail: LOG,
    attempts: [
      {
        number: 1,
        started: NOW - 600,
        ended: null,
        host: 'gpu-1',
        returncode: null,
        reason: null,
        retryable: null,
        step: null,
        runs_on: null
      }
    ]
  }),
  job({ id: 'j-queue', name: 'eval', state: 'queued', command: ['python', 'eval.py'] }),
  job({
    id: 'j-int',
    name: 'finetune',
    state: 'interrupted',
    command: ['python', 'finetune.py'],
    reason: 'interrupted by the runtime’s deadline at step 4,120',
    run: 'finetune.py',
    step: 4120,
    total_steps: 10000,
    relaunch: 'relaunches when this runtime has restored its checkpoint'
  }),
  job({
    id: 'j-rel',
    name: 'pretrain',
    state: 'relaunched',
    command: ['python', 'pretrain.py'],
    step: 300,
    total_steps: 1000
  }),
  job({
    id: 'j-retry',
    name: 'big-model',
    state: 'retrying',
    command: ['python', 'big.py'],
    retries: 2,
    reason: 'attempt 2 of 3: CUDA out of memory at step 4,120'
  }),
  job({
    id: 'j-fin',
    name: 'sweep.ipynb',
    kind: 'notebook',
    command: ['python', '-m', 'jupyter_gpu_ws.userjobs.notebook', 'sweep.ipynb'],
    notebook: 'sweep.ipynb',
    output: 'sweep.job.ipynb',
    state: 'finished',
    log_tail: ['done']
  }),
  job({
    id: 'j-fail',
    name: 'broken',
    state: 'failed',
    command: ['python', 'broken.py'],
    reason: 'SyntaxError in broken.py line 4 (not retried: it cannot change)'
  }),
  job({
    id: 'j-stop',
    name: 'probe',
    state: 'stopped',
    command: ['python', 'probe.py'],
    reason: 'stopped by you at step 80'
  }),
  job({
    id: 'j-held',
    name: 'long-run',
    state: 'held',
    command: ['python', 'long.py'],
    step: 9000,
    total_steps: 20000
  }),
  job({
    id: 'j-app',
    name: 'someone-else',
    state: 'interrupted',
    command: ['python', 'other.py'],
    needs_approval: true,
    reason: 'recorded without this workspace’s signature: relaunched only once you approve',
    approval: {
      reason: 'not signed',
      command: ['python', 'other.py'],
      cwd: '',
      notebook: null,
      changed: [],
      changed_more: 0
    }
  })
];

/** A record someone else wrote into the store, as the API lists it: its name with a terminal's
 * escape sequence and a right-to-left override, its code changed since it was signed. */
const AWAITING = job({
  id: 'j-await',
  name: '\u001b[31mtrain\u202egnp.py',
  state: 'interrupted',
  command: ['python', 'train.py', '--lr', '0.1', '--note', 'from the store'],
  cwd: 'experiments/run-7',
  needs_approval: true,
  reason: 'its runtime ended without stopping it (last recorded at step 4,120)',
  relaunch:
    'waits for your approval (restart it): signed with another key, or changed in the store since',
  log_tail: ['step 4100 loss 0.412', '\u001b[32mstep 4120 loss 0.407\u001b[0m'],
  approval: {
    reason: 'signed with another key, or changed in the store since',
    command: ['python', 'train.py', '--lr', '0.1', '--note', 'from the store'],
    cwd: 'experiments/run-7',
    notebook: null,
    changed: [
      { path: 'experiments/run-7/train.py', change: 'changed' },
      { path: 'experiments/run-7/helpers.py', change: 'added' },
      { path: 'experiments/run-7/old_data.py', change: 'missing' }
    ],
    changed_more: 2
  }
});

/** A job run elsewhere (a cluster's pod), as GET /gpuws/api/jobs lists it under `elsewhere`. */
const ELSEWHERE = {
  id: 'j-5e1f0c2a9d77',
  name: 'finetune on the cluster',
  host: 'finetune-x2k8p',
  state: 'running',
  returncode: null,
  error: null,
  command: ['torchrun', '--nproc-per-node', '8', 'finetune.py'],
  cwd: 'experiments',
  step: 48000,
  checkpoints: [{ run: '.gpuws/checkpoints/finetune', checkpoint: 'ckpt-000048000' }],
  outputs: [
    { path: 'experiments/notes.md', size: 20 },
    { path: 'experiments/eval.csv', size: 3 * 1024 * 1024 }
  ],
  outputs_count: 7,
  outputs_bytes: 5 * 1024 * 1024,
  files_more: 0,
  started: NOW - 7200,
  updated: NOW - 30
};

/** What POST …/bring-home answers for it. */
const BRING_HOME = {
  id: ELSEWHERE.id,
  brought: [
    'experiments/plots/loss.png',
    '.gpuws/checkpoints/finetune/ckpt-000048000/manifest.json'
  ],
  replaced: ['experiments/eval.csv'],
  beside: [{ path: 'experiments/notes.md', beside: 'experiments/notes.from-j-5e1f0c2a9d77.md' }],
  skipped: [],
  counts: { brought: 2, replaced: 1, beside: 1, skipped: 0, same: 3 },
  errors: [],
  files_more: 0
};

/** Every jobs request: the list, a job, its actions and its log. */
const JOBS_URL = /\/gpuws\/api\/jobs(\/[^?]*)?(\?.*)?$/;

interface ICall {
  method: string;
  path: string;
  body: unknown;
}

/** Answer this page's jobs requests: the list (`jobs`, changeable by the test), each action with
 * the job (recorded in `calls`), a log; `fail` (changeable too) makes an endpoint, by "METHOD
 * /path", answer an error instead. */
async function serveJobs(
  page: IJupyterLabPageFixture,
  listing: {
    jobs: unknown[];
    relaunch: { enabled: boolean; pending: string[] };
    error?: string;
    bad_records?: { file: string; reason: string }[];
    elsewhere?: unknown;
  },
  calls: ICall[],
  fail: { [key: string]: { status: number; message: string } } = {}
): Promise<void> {
  await page.route(JOBS_URL, async (route: Route, request: Request) => {
    const url = new URL(request.url());
    const rest = url.pathname.replace(/^.*\/gpuws\/api\/jobs/, '');
    const method = request.method();
    const body = request.postData() ? JSON.parse(request.postData()!) : null;
    // JupyterLab adds a number to each request's query so that no cache answers it: not ours.
    const query = url.search.replace(/^\?\d+$/, '').replace(/&\d+$/, '');
    if (!(method === 'GET' && rest === '')) {
      calls.push({ method, path: rest + query, body });
    }
    const failure = fail[`${method} ${rest}`];
    if (failure) {
      await route.fulfill({
        status: failure.status,
        contentType: 'application/json',
        body: JSON.stringify({ message: failure.message })
      });
    } else if (method === 'GET' && rest === '') {
      await route.fulfill({ json: listing });
    } else if (method === 'GET' && rest.endsWith('/log')) {
      await route.fulfill({
        json: { lines: Array.from({ length: 40 }, (_, i) => `line ${i + 1} of the whole log`) }
      });
    } else if (method === 'POST' && rest.endsWith('/bring-home')) {
      await route.fulfill({ json: BRING_HOME });
    } else if (method === 'DELETE') {
      await route.fulfill({ status: 204, body: '' });
    } else if (method === 'POST' && rest === '') {
      const name = path.basename(body.notebook ?? 'job');
      await route.fulfill({
        status: 201,
        json: job({
          id: 'j-new',
          name,
          kind: 'notebook',
          notebook: body.notebook,
          output: name.replace(/\.ipynb$/, '.job.ipynb'),
          state: 'queued'
        })
      });
    } else {
      const id = rest.split('/')[1];
      await route.fulfill({
        json: (listing.jobs as Array<{ id: string }>).find(j => j.id === id) ?? job({ id })
      });
    }
  });
}

/** A stopped run with a checkpoint at `step`, as GET /gpuws/api/training lists it. */
function trainedRun(run: string, step: number): { [name: string]: unknown } {
  return {
    run,
    kernel_id: null,
    notebook: null,
    live: false,
    state: 'stopped',
    step,
    done_steps: step + 1,
    total: null,
    rate: null,
    elapsed: 60,
    last_time: NOW - 600,
    eta: null,
    finish_at: null,
    verdict: null,
    values: {},
    scalars: [],
    sparkline: [],
    anomalies: [],
    checkpoint: { step, health: 'healthy', path: `/work/.gpuws/checkpoints/${run}`, time: NOW },
    tensorboard: null
  };
}

/** Answer this page's training view with these runs (what "Run as job" offers to resume). */
async function serveTraining(
  page: IJupyterLabPageFixture,
  runs: { [name: string]: unknown }[]
): Promise<void> {
  await page.route(/\/gpuws\/api\/training(\?.*)?$/, route =>
    route.fulfill({ json: { now: NOW, deadline: null, runs, anomalies: [], errors: [] } })
  );
}

/** The section's row of the job `id`. */
function row(page: IJupyterLabPageFixture, id: string) {
  return page.locator(PANEL).locator(`[data-testid="gpuws-job"][data-job="${id}"]`);
}

test('every state of a job renders with its words, colour, progress, log and buttons', async ({
  page
}) => {
  const calls: ICall[] = [];
  await serveJobs(page, { jobs: JOBS, relaunch: { enabled: true, pending: ['j-int'] } }, calls);
  await openPanel(page, 250);
  const section = page.locator(PANEL).locator('section[data-section="jobs"]');
  await expect(section.getByTestId('gpuws-job')).toHaveCount(JOBS.length, { timeout: 20000 });

  const expected: Array<[string, string, string, string[]]> = [
    // id, state word, colour class, buttons
    ['j-run', 'running', 'jp-gpuws-ok', ['stop']],
    ['j-queue', 'queued', 'jp-gpuws-job-state-quiet', ['stop']],
    ['j-int', 'interrupted', 'jp-gpuws-pending', ['hold']],
    ['j-rel', 'relaunched', 'jp-gpuws-ok', ['stop']],
    ['j-retry', 'retrying', 'jp-gpuws-pending', ['stop']],
    ['j-fin', 'finished', 'jp-gpuws-ok', ['restart']],
    ['j-fail', 'failed', 'jp-gpuws-tone-error', ['restart']],
    ['j-stop', 'stopped', 'jp-gpuws-job-state-quiet', ['restart']],
    ['j-held', 'held', 'jp-gpuws-pending', ['release', 'restart']],
    ['j-app', 'needs approval', 'jp-gpuws-pending', ['approve']]
  ];
  for (const [id, word, tone, buttons] of expected) {
    const state = row(page, id).getByTestId('gpuws-job-state');
    await expect(state, id).toHaveText(word);
    await expect(state, id).toHaveClass(new RegExp(tone));
    const shown = await row(page, id)
      .locator('.jp-gpuws-job-actions button.jp-gpuws-button')
      .evaluateAll(nodes =>
        nodes.map(n => (n.getAttribute('data-testid') ?? '').replace('gpuws-job-', ''))
      );
    expect(shown, id).toEqual(buttons);
  }

  // The running job: step / total, ETA, the verdict, and the last 5 lines of its log.
  const running = row(page, 'j-run');
  await expect(running.getByTestId('gpuws-job-progress')).toContainText('step 4,120/10,000');
  await expect(running.getByTestId('gpuws-job-progress')).toContainText('ETA 14 min');
  await expect(running.getByTestId('gpuws-job-verdict')).toHaveText('finishes before the deadline');
  // Its run, named as the Training and Checkpoints sections name it.
  await expect(running.getByTestId('gpuws-job-run')).toHaveText('run train.py');
  await expect(running.getByTestId('gpuws-job-log')).toHaveText(LOG.slice(-5).join('\n'));
  await expect(running.getByTestId('gpuws-job-log')).toHaveCSS(
    'font-family',
    /mono|Mono|Menlo|Consolas|Courier/
  );
  // The log folds away, and back.
  await running.getByTestId('gpuws-job-log-toggle').click();
  await expect(running.getByTestId('gpuws-job-log')).toHaveCount(0);
  await expect(running.getByTestId('gpuws-job-log-toggle')).toHaveText(
    'Show the last 5 lines of the log'
  );
  await running.getByTestId('gpuws-job-log-toggle').click();
  await expect(running.getByTestId('gpuws-job-log')).toBeVisible();

  // Reasons, in the user's words.
  await expect(row(page, 'j-retry').getByTestId('gpuws-job-reason')).toHaveText(
    'attempt 2 of 3: CUDA out of memory at step 4,120'
  );
  await expect(row(page, 'j-fail').getByTestId('gpuws-job-reason')).toContainText(
    'SyntaxError in broken.py line 4'
  );
  // Before the relaunch: what will be relaunched, from where, and Hold.
  await expect(row(page, 'j-int').getByTestId('gpuws-job-relaunch')).toContainText(
    'finetune.py will be relaunched from step 4,120 once the restore ends'
  );
  await expect(row(page, 'j-int').getByTestId('gpuws-job-hold')).toBeVisible();
  // A held job shows its step, and no ETA.
  await expect(row(page, 'j-held').getByTestId('gpuws-job-progress')).toHaveText(
    /^step 9,000\/20,000$/
  );

  // Jobs under way come right below Training (or first, with no run tracked), before the GPUs'.
  const order = await page
    .locator(PANEL)
    .locator('section[data-section]')
    .evaluateAll(nodes => nodes.map(n => n.getAttribute('data-section')));
  expect(order.indexOf('jobs')).toBeLessThan(order.indexOf('runtime'));
  // Nothing spills out of the panel at 250 px.
  const sideways = await page.locator(PANEL).evaluate(node => node.scrollWidth - node.clientWidth);
  expect(sideways).toBeLessThanOrEqual(0);

  // Folded, the section still says how its jobs are.
  await section.getByTestId('gpuws-fold-jobs').click();
  await expect(section.getByTestId('gpuws-section-summary')).toHaveText('10 jobs');
  await section.getByTestId('gpuws-fold-jobs').click();
  expect(calls).toEqual([]);
});

test('the section is absent with no job, and appears with a pending relaunch', async ({ page }) => {
  const listing = { jobs: [] as unknown[], relaunch: { enabled: true, pending: [] as string[] } };
  await serveJobs(page, listing, []);
  await openPanel(page, 250);
  await page.waitForResponse(r => r.url().includes('/gpuws/api/jobs'), { timeout: 20000 });
  await expect(page.locator(PANEL).locator('section[data-section="jobs"]')).toHaveCount(0);
  listing.jobs = [JOBS[2]];
  listing.relaunch.pending = ['j-int'];
  const section = page.locator(PANEL).locator('section[data-section="jobs"]');
  await expect(section).toHaveCount(1, { timeout: 20000 });
  await section.getByTestId('gpuws-fold-jobs').click();
  await expect(section.getByTestId('gpuws-section-summary')).toHaveText('1 to relaunch');
  await section.getByTestId('gpuws-fold-jobs').click();
});

test('each button calls its endpoint with its method', async ({ page }) => {
  const calls: ICall[] = [];
  await serveJobs(page, { jobs: JOBS, relaunch: { enabled: true, pending: ['j-int'] } }, calls);
  await openPanel(page, 250);
  await expect(row(page, 'j-run')).toBeVisible({ timeout: 20000 });
  const clicks: Array<[string, string, ICall]> = [
    ['j-run', 'stop', { method: 'DELETE', path: '/j-run', body: null }],
    ['j-fin', 'restart', { method: 'POST', path: '/j-fin/restart', body: {} }],
    ['j-int', 'hold', { method: 'POST', path: '/j-int/hold', body: { hold: true } }],
    ['j-held', 'release', { method: 'POST', path: '/j-held/hold', body: { hold: false } }],
    // The server takes a restart by the user as the approval of a record it cannot vouch for.
    ['j-app', 'approve', { method: 'POST', path: '/j-app/restart', body: {} }]
  ];
  for (const [id, action, call] of clicks) {
    calls.length = 0;
    await row(page, id).getByTestId(`gpuws-job-${action}`).click();
    if (action === 'approve') {
      // Approve asks first (the test above): its OK runs it.
      await page.locator('.jp-Dialog').getByRole('button', { name: 'Approve and run' }).click();
    }
    await expect.poll(() => calls.length, { message: `${id} ${action}` }).toBe(1);
    expect(calls[0]).toEqual(call);
  }
  await expect(page.locator(PANEL).getByTestId('gpuws-jobs-action-error')).toHaveCount(0);

  // Show full log: the server's kept lines in a read-only dialog.
  calls.length = 0;
  await row(page, 'j-run').getByTestId('gpuws-job-full-log').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Log of train');
  await expect(dialog.getByTestId('gpuws-job-full-log-text')).toContainText(
    'line 40 of the whole log'
  );
  expect(calls).toEqual([{ method: 'GET', path: '/j-run/log?lines=5000', body: null }]);
  await dialog.getByRole('button', { name: 'Close' }).click();
  await expect(dialog).toHaveCount(0);
});

test('a record awaiting approval shows what it runs, and Approve asks before it runs it', async ({
  page
}) => {
  const calls: ICall[] = [];
  await serveJobs(page, { jobs: [AWAITING], relaunch: { enabled: true, pending: [] } }, calls);
  await openPanel(page, 250);
  const card = row(page, 'j-await');
  await expect(card).toBeVisible({ timeout: 20000 });
  // Its command, folder and changed files, not only its name; the store's texts escaped.
  await expect(card.locator('.jp-gpuws-card-title')).toHaveText('\\x1b[31mtrain\\u202egnp.py');
  const approval = card.getByTestId('gpuws-job-approval');
  await expect(approval.getByTestId('gpuws-job-approval-command')).toHaveText(
    "python train.py --lr 0.1 --note 'from the store'"
  );
  await expect(approval.getByTestId('gpuws-job-approval-cwd')).toHaveText('in experiments/run-7');
  await expect(approval.getByTestId('gpuws-job-approval-changed')).toContainText(
    'experiments/run-7/train.py (changed)'
  );
  await expect(approval.getByTestId('gpuws-job-approval-changed')).toContainText('and 2 more');
  await expect(card.getByTestId('gpuws-job-log')).toContainText(
    '\\x1b[32mstep 4120 loss 0.407\\x1b[0m'
  );
  const text = await page.locator(PANEL).innerText();
  expect(text).not.toContain('\u001b');
  expect(text).not.toContain('\u202e');
  await page.addStyleTag({ content: '.jp-Launcher-cwd { visibility: hidden; }' });
  await page.mouse.move(1200, 780);
  await page.screenshot({ path: picturePath('panel-job-approval.png') });

  // Approve asks first, with the command, the folder, the reason and the changed files.
  await card.getByTestId('gpuws-job-approve').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Run \\x1b[31mtrain\\u202egnp.py?');
  await expect(dialog.getByTestId('gpuws-job-approval-command')).toHaveText(
    "python train.py --lr 0.1 --note 'from the store'"
  );
  await expect(dialog.getByTestId('gpuws-job-approval-cwd')).toHaveText('in experiments/run-7');
  await expect(dialog.getByTestId('gpuws-job-approval-reason')).toHaveText(
    'Why it asks: signed with another key, or changed in the store since'
  );
  await expect(dialog.getByTestId('gpuws-job-approval-changed')).toContainText(
    'experiments/run-7/old_data.py (missing)'
  );
  await page.screenshot({ path: picturePath('panel-job-approval-dialog.png') });
  // Cancel runs nothing.
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toHaveCount(0);
  expect(calls).toEqual([]);
  // Enter, on the dialog's default button (Cancel), runs nothing either.
  await card.getByTestId('gpuws-job-approve').click();
  await expect(dialog).toBeVisible();
  await page.keyboard.press('Enter');
  await expect(dialog).toHaveCount(0);
  expect(calls).toEqual([]);
  // OK runs it: the server's restart, the approval.
  await card.getByTestId('gpuws-job-approve').click();
  await dialog.getByRole('button', { name: 'Approve and run' }).click();
  await expect.poll(() => calls.length).toBe(1);
  expect(calls[0]).toEqual({ method: 'POST', path: '/j-await/restart', body: {} });
});

test('each record of the store that cannot be used is named with why, escaped, beside the jobs', async ({
  page
}) => {
  const calls: ICall[] = [];
  await serveJobs(
    page,
    {
      jobs: [AWAITING],
      relaunch: { enabled: true, pending: [] },
      bad_records: [
        { file: 'j-00000000dee9.json', reason: 'not JSON: nested too deeply' },
        { file: '\u001b[2Jx.json', reason: 'larger than 4 MiB' }
      ]
    },
    calls
  );
  await openPanel(page, 250);
  await expect(row(page, 'j-await')).toBeVisible({ timeout: 20000 });
  const bad = page.locator(PANEL).getByTestId('gpuws-jobs-bad-record');
  await expect(bad).toHaveText([
    'Job record j-00000000dee9.json is not used: not JSON: nested too deeply',
    'Job record \\x1b[2Jx.json is not used: larger than 4 MiB'
  ]);
});

test("an API error shows in the section with the server's message", async ({ page }) => {
  const calls: ICall[] = [];
  const failures: { [key: string]: { status: number; message: string } } = {
    'POST /j-fin/restart': {
      status: 409,
      message: 'sweep.ipynb has no checkpoint to restart from'
    },
    'GET /j-run/log': { status: 500, message: 'the log cannot be opened: permission denied' }
  };
  const listing: {
    jobs: unknown[];
    relaunch: { enabled: boolean; pending: string[] };
    error?: string;
  } = {
    jobs: JOBS,
    relaunch: { enabled: true, pending: ['j-int'] }
  };
  await serveJobs(page, listing, calls, failures);
  await openPanel(page, 250);
  await expect(row(page, 'j-fin')).toBeVisible({ timeout: 20000 });
  // The store the records live in, failing: the list says why.
  listing.error =
    'the jobs cannot be recorded in the store: it is read-only here (another runtime writes it)';
  await expect(page.locator(PANEL).getByTestId('gpuws-jobs-store-error')).toHaveText(
    listing.error,
    { timeout: 20000 }
  );
  await row(page, 'j-fin').getByTestId('gpuws-job-restart').click();
  await expect(page.locator(PANEL).getByTestId('gpuws-jobs-action-error')).toHaveText(
    'Cannot restart sweep.ipynb: sweep.ipynb has no checkpoint to restart from'
  );
  // The log that cannot be read says why, in its dialog.
  await row(page, 'j-run').getByTestId('gpuws-job-full-log').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog.getByTestId('gpuws-job-full-log-error')).toHaveText(
    'The log cannot be read: the log cannot be opened: permission denied'
  );
  await dialog.getByRole('button', { name: 'Close' }).click();
  // The list itself failing: its reason shows, the jobs last seen stay.
  failures['GET '] = { status: 503, message: 'the store cannot be read: connection refused' };
  await expect(page.locator(PANEL).getByTestId('gpuws-jobs-error')).toHaveText(
    'the store cannot be read: connection refused',
    {
      timeout: 20000
    }
  );
  await expect(row(page, 'j-run')).toBeVisible();
});

test('"Run as job" in the file browser and the palette posts the notebook and names the job', async ({
  page,
  tmpPath
}) => {
  const calls: ICall[] = [];
  await serveJobs(page, { jobs: [], relaunch: { enabled: true, pending: [] } }, calls);
  await serveTraining(page, []); // no run to resume: nothing to ask
  const file = 'run-as-job-check.ipynb';
  const name = `${tmpPath}/${file}`;
  await writeNotebook(page, name, ['print("hello")']);
  await page.filebrowser.refresh();
  const item = page.locator('.jp-DirListing-item', { hasText: file });
  await item.click({ button: 'right' });
  const menu = page.locator('.lm-Menu');
  await menu.getByText('Run as job', { exact: true }).click();
  await expect.poll(() => calls.length).toBe(1);
  expect(calls[0]).toEqual({ method: 'POST', path: '', body: { notebook: name } });
  const toast = page.locator('.Toastify__toast').filter({ hasText: `Job "${file}" started` });
  await expect(toast).toHaveCount(1);
  await expect(toast).toContainText('run-as-job-check.job.ipynb');
  // Its link leads to the panel.
  await toast.getByText('Show in GPU Workspace').click();
  await expect(page.locator(PANEL)).toBeVisible();

  // The palette's "Run notebook as job", for the notebook in front.
  calls.length = 0;
  await page.evaluate(async path => {
    await window.jupyterapp.commands.execute('docmanager:open', {
      path,
      factory: 'Notebook'
    });
  }, name);
  await expect.poll(() => page.notebook.isOpen(file), { timeout: 30000 }).toBe(true);
  await page.notebook.activate(file);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpuws:run-notebook-as-job');
  });
  await expect.poll(() => calls.length).toBe(1);
  expect(calls[0]).toEqual({ method: 'POST', path: '', body: { notebook: name } });
  await page.notebook.close(true);
});

test('"Run as job" asks first where there are runs to resume: a new run unless one is picked', async ({
  page,
  tmpPath
}) => {
  const calls: ICall[] = [];
  // trainA is the run of a running job: a second job may not write it, so it is not offered.
  const writer = job({ id: 'j-writer', name: 'writer', state: 'running', run: 'trainA' });
  await serveJobs(page, { jobs: [writer], relaunch: { enabled: true, pending: [] } }, calls);
  await serveTraining(page, [trainedRun('trainB', 1400), trainedRun('trainA', 80)]);
  const file = 'run-choice-check.ipynb';
  const name = `${tmpPath}/${file}`;
  await writeNotebook(page, name, ['print("hello")']);
  await page.filebrowser.refresh();
  const runAsJob = async () => {
    await page.locator('.jp-DirListing-item', { hasText: file }).click({ button: 'right' });
    await page.locator('.lm-Menu').getByText('Run as job', { exact: true }).click();
    return page.locator('.jp-Dialog');
  };

  // The default: a new run of its own.
  let dialog = await runAsJob();
  const choice = dialog.getByTestId('gpuws-run-choice');
  await expect(choice).toHaveValue('');
  await expect(choice.locator('option')).toHaveText([
    'a new run of its own',
    'run trainB, resumed from step 1,400'
  ]);
  await dialog.getByRole('button', { name: 'Run' }).click();
  await expect.poll(() => calls.length).toBe(1);
  expect(calls[0]).toEqual({ method: 'POST', path: '', body: { notebook: name } });

  // A run picked: the job continues it.
  dialog = await runAsJob();
  await dialog.getByTestId('gpuws-run-choice').selectOption('trainB');
  await dialog.getByRole('button', { name: 'Run' }).click();
  await expect.poll(() => calls.length).toBe(2);
  expect(calls[1]).toEqual({
    method: 'POST',
    path: '',
    body: { notebook: name, resume: 'trainB' }
  });

  // Cancelled: nothing runs.
  dialog = await runAsJob();
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  await expect(dialog).toHaveCount(0);
  expect(calls).toHaveLength(2);
});

test('the Jobs section in the light and dark themes', async ({ page }) => {
  // The running job, one to relaunch and a retry: what a user comes back to.
  const shown = [JOBS[0], JOBS[2], JOBS[4]];
  await serveJobs(page, { jobs: shown, relaunch: { enabled: true, pending: ['j-int'] } }, []);
  await openPanel(page, 250);
  const panel = page.locator(PANEL);
  await expect(row(page, 'j-run')).toBeVisible({ timeout: 20000 });
  // Not the test's folder name (the Launcher's heading).
  await page.addStyleTag({ content: '.jp-Launcher-cwd { visibility: hidden; }' });
  // The sections above it folded, so the picture is the Jobs section's.
  for (const id of await panel
    .locator('section[data-section]')
    .evaluateAll(nodes => nodes.map(n => n.getAttribute('data-section')))) {
    const fold = panel.getByTestId(`gpuws-fold-${id}`);
    if (id !== 'jobs' && (await fold.getAttribute('aria-expanded')) === 'true') {
      await fold.click();
    }
  }
  for (const theme of ['light', 'dark']) {
    if (theme === 'dark') {
      await page.theme.setDarkTheme();
    } else {
      await page.theme.setLightTheme();
    }
    await page.mouse.move(1200, 780);
    await panel.evaluate(node => node.scrollTo(0, 0));
    await expect(row(page, 'j-int').getByTestId('gpuws-job-relaunch')).toBeVisible();
    await page.screenshot({ path: picturePath(`panel-jobs-${theme}.png`) });
  }
  await page.theme.setLightTheme();
  for (const id of [
    'gpus',
    'runtime',
    'sync',
    'checkpoints',
    'training',
    'environment',
    'system'
  ]) {
    const fold = panel.getByTestId(`gpuws-fold-${id}`);
    if ((await fold.count()) && (await fold.getAttribute('aria-expanded')) === 'false') {
      await fold.click();
    }
  }
});

/** Right-click `file` in the file browser, "Run as job", then the notification's link to the
 * panel: the server's answer (a 201), the job it made and the job's row in the panel. */
async function runFromFileBrowser(page: IJupyterLabPageFixture, file: string) {
  await page.filebrowser.refresh();
  await page.locator('.jp-DirListing-item', { hasText: file }).click({ button: 'right' });
  const posted = page.waitForResponse(
    r => r.url().includes('/gpuws/api/jobs') && r.request().method() === 'POST'
  );
  await page.locator('.lm-Menu').getByText('Run as job', { exact: true }).click();
  const answer = await Promise.race([posted, newRunChosen(page, posted)]);
  expect(answer.status(), await answer.text()).toBe(201);
  const created = await answer.json();
  await page
    .locator('.Toastify__toast')
    .filter({ hasText: `Job "${created.name}" started` })
    .getByText('Show in GPU Workspace')
    .click();
  return { answer, created, jobRow: row(page, created.id) };
}

/**
 * Where the work directory has runs a job could continue (earlier tests' runs on this shared
 * server), Run as job asks first: take its default, a new run of its own, then the job's POST.
 */
async function newRunChosen(
  page: IJupyterLabPageFixture,
  posted: Promise<Response>
): Promise<Response> {
  const dialog = page.locator('.jp-Dialog').filter({ has: page.getByTestId('gpuws-run-choice') });
  await dialog.waitFor({ timeout: 60000 });
  await expect(dialog.getByTestId('gpuws-run-choice')).toHaveValue('');
  await dialog.getByRole('button', { name: 'Run' }).click();
  return posted;
}

/** The job's row says running (with Stop), then finished (with Restart). */
async function seenRunningThenFinished(jobRow: ReturnType<typeof row>): Promise<void> {
  await expect(jobRow.getByTestId('gpuws-job-state')).toHaveText('running', { timeout: 30000 });
  await expect(jobRow.getByTestId('gpuws-job-stop')).toBeVisible();
  await expect(jobRow.getByTestId('gpuws-job-state')).toHaveText('finished', { timeout: 90000 });
  await expect(jobRow.getByTestId('gpuws-job-restart')).toBeVisible();
}

test('a notebook run as a job on the real server shows running, then finished', async ({
  page,
  tmpPath
}) => {
  const file = 'job-real-run.ipynb';
  // Long enough to be seen running between two of the panel's looks (every 3 s).
  await writeNotebook(page, `${tmpPath}/${file}`, [
    'import time\nfor i in range(10): print(f"tick {i}", flush=True); time.sleep(1)'
  ]);
  const { created, jobRow } = await runFromFileBrowser(page, file);
  await seenRunningThenFinished(jobRow);
  // Its outputs are in the copy beside it.
  const output = await (await page.request.get(`/api/contents/${created.output}?content=1`)).json();
  expect(JSON.stringify(output.content.cells[0].outputs)).toContain('tick 9');
  // Ended, it is forgotten on request (DELETE), as the API has it: nothing else here uses it.
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
});

/** A Python file in the server's folder `folder`, written as a user's editor would. */
async function writeScript(
  page: IJupyterLabPageFixture,
  folder: string,
  file: string,
  lines: string[]
): Promise<void> {
  const written = await page.request.put(`/api/contents/${folder}/${file}`, {
    data: { type: 'file', format: 'text', content: lines.join('\n') + '\n' }
  });
  expect(written.ok()).toBeTruthy();
}

test('a Python script run as a job from the file browser runs on the real server', async ({
  page,
  tmpPath
}) => {
  const file = 'job-real-script.py';
  // Long enough to be seen running between two of the panel's looks (every 3 s).
  await writeScript(page, tmpPath, file, [
    'import time',
    'for i in range(10):',
    '    print(f"tick {i}", flush=True)',
    '    time.sleep(1)'
  ]);
  const { answer, created, jobRow } = await runFromFileBrowser(page, file);
  // Run as from a terminal in its folder: python NAME there.
  expect(answer.request().postDataJSON()).toEqual({ command: ['python', file], cwd: tmpPath });
  await seenRunningThenFinished(jobRow);
  await expect(jobRow.getByTestId('gpuws-job-log')).toContainText('tick 9');
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
});

/** A tracked loop with a total: its run has a pace and an ETA after a few steps. */
const TRACKED_LOOP = `import time
import jupyter_gpu_ws as gpuws
gpuws.track(position={"i": 0}, total_steps=60)
for i in range(60):
    gpuws.step(i, loss=1.0 / (i + 1))
    time.sleep(0.5)`;

test("a running job's card shows its ETA once, on a runtime without a deadline", async ({
  page,
  tmpPath
}) => {
  await writeScript(page, tmpPath, 'job-eta.py', TRACKED_LOOP.split('\n'));
  const answer = await page.request.post('/gpuws/api/jobs', {
    data: { command: ['python', 'job-eta.py'], cwd: tmpPath }
  });
  expect(answer.status(), await answer.text()).toBe(201);
  const created = await answer.json();
  await openPanel(page, 250);
  const jobRow = row(page, created.id);
  // Beside its step, as a tracked run's; the verdict has nothing to add without a deadline.
  await expect(jobRow.getByTestId('gpuws-job-progress')).toContainText('ETA', { timeout: 60000 });
  expect((await jobRow.innerText()).match(/ETA/g)).toHaveLength(1);
  // Stopped, then forgotten: nothing else here uses it.
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
  await page.request.delete(`/gpuws/api/jobs/${created.id}`);
});

test('a job run elsewhere shows where it runs and its outputs, and Bring home says what stayed yours', async ({
  page
}) => {
  const calls: ICall[] = [];
  await serveJobs(
    page,
    {
      jobs: [],
      relaunch: { enabled: true, pending: [] },
      elsewhere: {
        jobs: [ELSEWHERE],
        more: 0,
        problems: [{ id: 'not-a-job\\x1b[31m', reason: "not a job's id: not looked at" }],
        error: null
      }
    },
    calls
  );
  await openPanel(page, 250);
  const card = page
    .locator(PANEL)
    .locator(`[data-testid="gpuws-elsewhere-job"][data-job="${ELSEWHERE.id}"]`);
  await expect(card.getByTestId('gpuws-elsewhere-state')).toHaveText('running', {
    timeout: 20000
  });
  await expect(card.getByTestId('gpuws-elsewhere-state')).toHaveClass(/jp-gpuws-ok/);
  await expect(card.getByTestId('gpuws-elsewhere-line')).toContainText(
    'elsewhere on finetune-x2k8p · step 48,000 · 7 outputs (5.0 MiB) · last heard of'
  );
  await expect(card.getByTestId('gpuws-elsewhere-outputs')).toHaveText(
    'Outputs: experiments/notes.md, experiments/eval.csv and 5 more'
  );
  await expect(page.locator(PANEL).getByTestId('gpuws-elsewhere-problem')).toHaveText(
    "The job run elsewhere not-a-job\\x1b[31m is not listed: not a job's id: not looked at"
  );

  await card.getByTestId('gpuws-elsewhere-bring-home').click();
  const told = page.locator(PANEL).getByTestId('gpuws-homecoming');
  await expect(told).toContainText(
    'finetune on the cluster brought home: 2 files brought, 1 replaced (as the job began from them), 1 beside yours (changed here since the job began), 3 already here'
  );
  await expect(told.getByTestId('gpuws-homecoming-line')).toHaveText([
    "experiments/notes.md kept: the job's version is experiments/notes.from-j-5e1f0c2a9d77.md"
  ]);
  expect(calls).toContainEqual({
    method: 'POST',
    path: `/elsewhere/${ELSEWHERE.id}/bring-home`,
    body: {}
  });
});
