// The user's jobs: the buttons each offers in each state, their words and tones, and the model
// that acts on them and says why the server refused.
import { ITrainingRun, IUserJob } from '../api';
import * as api from '../api';
import { jobActions, jobActive, JobsModel, resumableRuns } from '../jobs/model';
import {
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

  it('runs a notebook in a new run, or continuing the run the user picked', async () => {
    mocked.startJob.mockResolvedValue(job());
    await model.runNotebook('nb.ipynb');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ notebook: 'nb.ipynb' });
    await model.runNotebook('nb.ipynb', 'trainA');
    expect(mocked.startJob).toHaveBeenLastCalledWith({ notebook: 'nb.ipynb', resume: 'trainA' });
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
