// The checkpoints model: a request this page sent shows until the server has carried it out,
// and a failed request says why.
import { ICheckpointKernel } from '../api';
import { CheckpointsModel } from '../checkpoints/model';
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
