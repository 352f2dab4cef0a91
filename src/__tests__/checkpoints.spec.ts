// The checkpoints model: a request this page sent shows until the server has carried it out,
// and a failed request says why. A run's card: a job's one process is the job's, with its newest
// checkpoint; a torchrun run keeps its ranks.
import { ICheckpointKernel, IDistributedRun } from '../api';
import { CheckpointsModel } from '../checkpoints/model';
import { newestCheckpointText, rankState, runHow, shownRanks } from '../checkpoints/words';
import { answer } from './server';

jest.mock('../api', () => ({ requestAPI: jest.fn() }));

function kernel(fields: Partial<ICheckpointKernel> = {}): ICheckpointKernel {
  // Cast: a test names only the fields it is about.
  return {
    kernel_id: 'k1',
    writing: false,
    pending: null,
    request: null,
    ...fields
  } as ICheckpointKernel;
}

let model: CheckpointsModel;

beforeEach(() => {
  answer({});
  model = new CheckpointsModel();
});

afterEach(() => model.dispose());

it('remembers a request until the kernel has carried it out', async () => {
  const pending = { request_id: 'r1', requested: 1 };
  answer({
    checkpoints: (init?: RequestInit) =>
      init?.method === 'POST'
        ? { requests: [{ state: 'pending' }] }
        : { kernels: [kernel({ pending })] }
  });
  const request = await model.checkpoint({ kernel_id: 'k1' });
  expect(request.state).toBe('pending');
  expect(model.requested.has('k1')).toBe(true);
  answer({ checkpoints: { kernels: [kernel()], runs: [] } });
  await model.refresh();
  expect(model.requested.has('k1')).toBe(false);
});

it('forgets a request that failed, and gives the reason', async () => {
  answer({
    checkpoints: (init?: RequestInit) =>
      init?.method === 'POST' ? new Error('no such kernel') : { kernels: [] }
  });
  await expect(model.checkpoint({ run_id: 'run-1' })).rejects.toThrow('no such kernel');
  expect(model.requested.has('run-1')).toBe(false);
});

const NOW = 1_000_000;

function checkpoint(step: number, ranks: number[]): IDistributedRun['checkpoints'][number] {
  const bytes = ranks.reduce((a, b) => a + b, 0);
  return {
    step,
    time: NOW - 12,
    bytes,
    world_size: ranks.length,
    bytes_per_rank: ranks,
    path: `/w/.gpuws/checkpoints/r/ckpt-${step}`,
    synced: true
  };
}

/** A job's run as the server lists it: one plain process, rank 0, saved without DCP. */
function jobRun(fields: Partial<IDistributedRun> = {}): IDistributedRun {
  return {
    run_id: 'abc',
    kind: 'process',
    run: 'trainer',
    live: true,
    job: 'j-0123456789ab',
    job_name: 'trainer',
    world_size: 1,
    ranks: [{ rank: 0, phase: null, step: 40 }],
    checkpoints: [checkpoint(400, [19_000])],
    ...fields
  } as IDistributedRun;
}

/** A torchrun run of two ranks, sharded. */
function torchrunRun(fields: Partial<IDistributedRun> = {}): IDistributedRun {
  return {
    run_id: 'def',
    kind: 'torchrun',
    run: 'fsdp',
    live: true,
    job: null,
    world_size: 2,
    mesh: { parallelism: 'sharded' },
    ranks: [
      { rank: 0, phase: 'idle' },
      { rank: 1, phase: 'writing' }
    ],
    checkpoints: [checkpoint(200, [2048, 2048])],
    ...fields
  } as IDistributedRun;
}

describe("a job's run on its card", () => {
  it('is the job, running or not, never torchrun', () => {
    expect(runHow(jobRun())).toBe('job trainer · running');
    expect(runHow(jobRun({ live: false }))).toBe('job trainer · not running');
    expect(runHow(jobRun({ job_name: null }))).toBe('job j-0123456789ab · running');
  });

  it('has no rank line: its one process is rank 0', () => {
    expect(shownRanks(jobRun())).toEqual([]);
  });

  it('shows its newest checkpoint, one restored from the store too, without ranks', () => {
    expect(newestCheckpointText(jobRun(), NOW)).toBe('step 400 · 12 s ago · 18.6 KiB');
    expect(newestCheckpointText(jobRun({ checkpoints: [] }), NOW)).toBeNull();
  });

  it("escapes a job's name from the store", () => {
    expect(runHow(jobRun({ job_name: 'evil\u202egnp.py' }))).toBe(
      'job evil\\u202egnp.py · running'
    );
  });
});

describe('a torchrun run on its card', () => {
  it('keeps its ranks, their parallelism and their part of each checkpoint', () => {
    const run = torchrunRun();
    expect(runHow(run)).toBe('torchrun · 2 ranks · sharded');
    expect(shownRanks(run).map(rank => `rank ${rank.rank}: ${rankState(rank)}`)).toEqual([
      'rank 0: training',
      'rank 1: writing'
    ]);
    expect(newestCheckpointText(run, NOW)).toBe(
      'step 200 · 12 s ago · 4.0 KiB on 2 ranks (2.0 KiB + 2.0 KiB)'
    );
    expect(runHow(torchrunRun({ live: false, run_id: null }))).toBe('not running');
  });
});
