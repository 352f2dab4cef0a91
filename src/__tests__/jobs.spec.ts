// The user's jobs: the buttons each offers in each state, their words and tones, and the model
// that acts on them and says why the server refused. And the jobs run elsewhere: their words,
// and bringing one home.
import { IBringHome, IElsewhereJob, ITrainingRun, IUserJob } from '../api';
import * as api from '../api';
import { jobActions, jobActive, JobsModel, resumableRuns } from '../jobs/model';
import {
  elsewhereLine,
  elsewhereStateWord,
  elsewhereTone,
  homecomingLines,
  jobEtaText,
  jobRunText,
  jobsSummary,
  jobStateWord,
  jobStepText,
  jobTone,
  jobWhat,
  relaunchText
} from '../jobs/words';

jest.mock('../api', () => ({
  listJobs: jest.fn(),
  startJob: jest.fn(),
  stopJob: jest.fn(),
  restartJob: jest.fn(),
  holdJob: jest.fn(),
  bringHome: jest.fn(),
  requestAPI: jest.fn()
}));

const mocked = api as jest.Mocked<typeof api>;

function job(fields: Partial<IUserJob> = {}): IUserJob {
  // Cast: a test names only the fields it is about.
  return {
    id: 'j1',
    name: 'train',
    command: ['python', 'train.py', '--lr', '0.1'],
    notebook: null,
    state: 'running',
    step: 4120,
    total_steps: 10000,
    eta_seconds: 13 * 60,
    needs_approval: false,
    ...fields
  } as IUserJob;
}

describe('what a job offers', () => {
  it('offers Stop while it runs, Restart once it ended', () => {
    expect(jobActions(job(), [])).toEqual(['stop']);
    expect(jobActions(job({ state: 'failed' }), [])).toEqual(['restart']);
  });

  it('offers Hold for a relaunch that is due, and letting go of a hold', () => {
    expect(jobActions(job({ state: 'interrupted' }), ['j1'])).toEqual(['hold']);
    expect(jobActions(job({ state: 'interrupted' }), [])).toEqual(['hold', 'restart']);
    expect(jobActions(job({ state: 'held' }), [])).toEqual(['release', 'restart']);
  });

  it('offers only Approve for a record this runtime cannot vouch for', () => {
    expect(jobActions(job({ state: 'failed', needs_approval: true }), [])).toEqual(['approve']);
    expect(jobStateWord(job({ needs_approval: true }))).toBe('needs approval');
    expect(jobTone(job({ needs_approval: true }))).toBe('pending');
  });

  it('counts as active while under way, due or waiting for approval', () => {
    expect(jobActive(job({ state: 'retrying' }), [])).toBe(true);
    expect(jobActive(job({ state: 'interrupted' }), ['j1'])).toBe(true);
    expect(jobActive(job({ state: 'finished' }), [])).toBe(false);
  });
});

describe("a job's words", () => {
  it('names what it runs: the notebook, or the script of its command', () => {
    expect(jobWhat(job())).toBe('train.py');
    expect(jobWhat(job({ notebook: 'work/nb/train.ipynb' }))).toBe('train.ipynb');
    expect(jobWhat(job({ command: ['sleep', '5'] }))).toBe('sleep 5');
    // As the store has it, escaped: a right-to-left override shows no other name.
    expect(jobWhat(job({ command: ['python', '\u202egnp.py'] }))).toBe('\\u202egnp.py');
  });

  it('reads its step and, while it runs, its ETA', () => {
    expect(jobStepText(job())).toBe('step 4,120/10,000');
    expect(jobStepText(job({ step: null }))).toBeNull();
    expect(jobEtaText(job())).toBe('ETA 13 min');
    expect(jobEtaText(job({ state: 'interrupted' }))).toBeNull();
  });

  it('says what will be relaunched, and from which step', () => {
    expect(relaunchText(job())).toBe(
      'train.py will be relaunched from step 4,120 once the restore ends'
    );
  });

  it('colours its state', () => {
    expect(jobTone(job({ state: 'finished' }))).toBe('ok');
    expect(jobTone(job({ state: 'held' }))).toBe('pending');
    expect(jobTone(job({ state: 'failed' }))).toBe('error');
    expect(jobTone(job({ state: 'stopped' }))).toBe('none');
  });

  it('sums the jobs up by state when folded, or counts them when too varied', () => {
    const two = [job(), job({ id: 'j2', state: 'failed' })];
    expect(jobsSummary(two, [])).toBe('1 running · 1 failed');
    expect(jobsSummary([job({ state: 'interrupted' })], ['j1'])).toBe('1 to relaunch');
    expect(jobsSummary([...two, job({ id: 'j3', state: 'held' })], [])).toBe('3 jobs');
  });
});

describe("a job's run", () => {
  it('is named as the Training and Checkpoints sections name it, and says what it resumed', () => {
    expect(jobRunText(job({ run: 'train.py-89ab', resumed_step: null }))).toBe('run train.py-89ab');
    expect(jobRunText(job({ run: 'trainA', resumed_step: 1400 }))).toBe(
      'run trainA, resumed from step 1,400'
    );
    expect(jobRunText(job({ run: null }))).toBeNull();
    expect(jobRunText(job({ run: 'a\u001b[2Jb' }))).toBe('run a\\x1b[2Jb');
  });

  function trained(run: string, step: number | null): ITrainingRun {
    return { run, checkpoint: step === null ? null : { step } } as ITrainingRun;
  }

  it('may be resumed by a new job where it has a checkpoint and no active job writes it', () => {
    const runs = [trained('A', 1400), trained('B', 20), trained('fresh', null), trained('C', 3)];
    const jobs = [job({ run: 'B', state: 'running' }), job({ run: 'C', state: 'finished' })];
    expect(resumableRuns(runs, jobs)).toEqual([
      { run: 'A', step: 1400 },
      { run: 'C', step: 3 }
    ]);
  });
});

describe('the jobs model', () => {
  let model: JobsModel;

  beforeEach(() => {
    mocked.listJobs.mockResolvedValue({ jobs: [job()], relaunch: { pending: ['j1'] } } as never);
    model = new JobsModel();
  });

  afterEach(() => model.dispose());

  it('lists the jobs and those due to be relaunched', async () => {
    await model.refresh();
    expect(model.jobs.map(j => j.id)).toEqual(['j1']);
    expect(model.pending).toEqual(['j1']);
  });

  it("says why an action was refused, in the user's words, until the next action", async () => {
    mocked.holdJob.mockRejectedValueOnce(new Error('the job has ended'));
    await model.act(job(), 'release');
    expect(mocked.holdJob).toHaveBeenCalledWith('j1', false);
    expect(model.actionError).toBe('Cannot stop holding train: the job has ended');
    expect(model.busy.size).toBe(0);
    mocked.stopJob.mockResolvedValueOnce();
    await model.act(job(), 'stop');
    expect(model.actionError).toBeNull();
  });

  it('approves a record by restarting it', async () => {
    mocked.restartJob.mockResolvedValueOnce(job());
    await model.act(job({ needs_approval: true }), 'approve');
    expect(mocked.restartJob).toHaveBeenCalledWith('j1');
  });

  it('runs a notebook as a notebook, and a script as python NAME in its folder', async () => {
    mocked.startJob.mockResolvedValue(job());
    await model.runFile('sub/dir/analysis.ipynb');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ notebook: 'sub/dir/analysis.ipynb' });
    await model.runFile('sub/dir/train.py');
    expect(mocked.startJob).toHaveBeenLastCalledWith({
      command: ['python', 'train.py'],
      cwd: 'sub/dir'
    });
    await model.runFile('train.py');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ command: ['python', 'train.py'], cwd: '' });
  });

  it('runs a notebook or a script in a new run, or continuing the run the user picked', async () => {
    mocked.startJob.mockResolvedValue(job());
    await model.runFile('nb.ipynb');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ notebook: 'nb.ipynb' });
    await model.runFile('nb.ipynb', 'trainA');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ notebook: 'nb.ipynb', resume: 'trainA' });
    await model.runFile('train.py', 'trainA');
    expect(mocked.startJob).toHaveBeenLastCalledWith({
      command: ['python', 'train.py'],
      cwd: '',
      resume: 'trainA'
    });
  });

  it('offers the runs the training view lists with a checkpoint but those of running jobs, none when it cannot ask', async () => {
    mocked.listJobs.mockResolvedValueOnce({
      jobs: [job({ run: 'trainB', state: 'running' })],
      relaunch: { pending: [] }
    } as never);
    mocked.requestAPI.mockResolvedValueOnce({
      runs: [
        { run: 'trainA', checkpoint: { step: 1400 } },
        { run: 'trainB', checkpoint: { step: 3 } }
      ]
    } as never);
    expect(await model.resumableRuns()).toEqual([{ run: 'trainA', step: 1400 }]);
    expect(mocked.requestAPI).toHaveBeenCalledWith('training');
    mocked.requestAPI.mockRejectedValueOnce(new Error('the server is away'));
    expect(await model.resumableRuns()).toEqual([]);
  });

  it('folds and unfolds a log', () => {
    model.toggleLog('j1');
    expect(model.foldedLogs.has('j1')).toBe(true);
    model.toggleLog('j1');
    expect(model.foldedLogs.has('j1')).toBe(false);
  });
});

function away(fields: Partial<IElsewhereJob> = {}): IElsewhereJob {
  return {
    id: 'j-0123456789ab',
    name: 'train',
    state: 'running',
    returncode: null,
    host: 'train-pod-7f9c4',
    command: ['python', 'train.py'],
    cwd: '',
    error: null,
    step: 1200,
    checkpoints: [],
    outputs: [{ path: 'results.csv', size: 2048 }],
    outputs_count: 4,
    outputs_bytes: 4096,
    files_more: 0,
    started: 1000,
    updated: 1000,
    ...fields
  };
}

const ANSWER: IBringHome = {
  id: 'j-0123456789ab',
  brought: ['out/metrics.json'],
  replaced: ['results.csv'],
  beside: [{ path: 'notes.md', beside: 'notes.from-j-0123456789ab.md' }],
  skipped: [],
  counts: { brought: 1, replaced: 1, beside: 1, skipped: 0, same: 2 },
  errors: [],
  files_more: 0
};

describe('a job run elsewhere', () => {
  it('says how it ended, and colours it', () => {
    expect(elsewhereStateWord(away())).toBe('running');
    expect(elsewhereStateWord(away({ state: 'ended', returncode: 0 }))).toBe('finished');
    expect(elsewhereStateWord(away({ state: 'ended', returncode: 3 }))).toBe(
      'failed (exit status 3)'
    );
    expect(elsewhereTone(away({ state: 'ended', returncode: 3 }))).toBe('error');
    expect(elsewhereTone(away({ state: 'starting' }))).toBe('pending');
  });

  it('says where it runs, its step, its outputs and when it was last heard of', () => {
    expect(elsewhereLine(away(), 1040)).toBe(
      'on train-pod-7f9c4 · step 1,200 · 4 outputs (4.0 KiB) · last heard of 40 s ago'
    );
    // Its host is anyone's who writes the store: escaped.
    expect(elsewhereLine(away({ host: 'pod\u001b[2J', step: null, updated: null }), 0)).toBe(
      'on pod\\x1b[2J · 4 outputs (4.0 KiB)'
    );
  });

  it('says what bringing it home did, and where the job put its version of a file kept', () => {
    expect(homecomingLines(ANSWER)).toEqual([
      '1 file brought, 1 replaced (as the job began from them), 1 beside yours (changed here since the job began), 2 already here',
      "notes.md kept: the job's version is notes.from-j-0123456789ab.md"
    ]);
  });

  it('is counted in the folded section', () => {
    expect(jobsSummary([job()], [], 2)).toBe('1 running · 2 elsewhere');
    expect(jobsSummary([], [], 1)).toBe('1 elsewhere');
  });
});

describe('bringing a job run elsewhere home', () => {
  let model: JobsModel;

  beforeEach(() => {
    mocked.listJobs.mockResolvedValue({
      jobs: [],
      relaunch: { pending: [] },
      elsewhere: { jobs: [away()], more: 0, problems: [], error: null }
    } as never);
    model = new JobsModel();
  });

  afterEach(() => model.dispose());

  it('lists the jobs run elsewhere, and keeps what bringing one home did', async () => {
    await model.refresh();
    expect(model.elsewhere.map(j => j.id)).toEqual(['j-0123456789ab']);
    mocked.bringHome.mockResolvedValueOnce(ANSWER);
    expect(await model.bringHome(away())).toEqual(ANSWER);
    expect(mocked.bringHome).toHaveBeenCalledWith('j-0123456789ab');
    expect(model.homecoming?.answer).toEqual(ANSWER);
    expect(model.busy.size).toBe(0);
  });

  it('says why the server refused', async () => {
    mocked.bringHome.mockRejectedValueOnce(new Error('The store cannot be read now'));
    expect(await model.bringHome(away())).toBeNull();
    expect(model.actionError).toBe('Cannot bring train home: The store cannot be read now');
  });
});
