// The GPUs and the system in a few words: the status bar's GPU part and the folded sections.
import { IGpu, ISample, ISystem } from '../api';
import { gpuSummary, systemSummary } from '../metrics/words';

const GiB = 2 ** 30;

function gpu(index: number, utilization: number, used: number): IGpu {
  // Cast: a test names only the fields it is about.
  return {
    index,
    name: 'NVIDIA A100',
    uuid: `GPU-${index}`,
    utilization,
    memory_used: used * GiB,
    memory_total: 40 * GiB
  } as IGpu;
}

function sample(gpus: IGpu[], fields: Partial<ISample> = {}): ISample {
  return { gpus, alerts: [], gpu_error: null, ...fields } as ISample;
}

it('reads one GPU as its utilisation and memory', () => {
  expect(gpuSummary(sample([gpu(0, 47, 15)]))).toMatchObject({
    text: 'GPU 47 % · 15.0/40 GiB',
    level: 'none'
  });
});

it('sums up GPUs that work alike', () => {
  expect(gpuSummary(sample([gpu(0, 50, 10), gpu(1, 60, 12)])).text).toBe(
    '2 GPUs 55 % · 22.0/80 GiB'
  );
});

it('shows the busiest of GPUs that differ', () => {
  expect(gpuSummary(sample([gpu(0, 97, 38.9), gpu(1, 5, 1)])).text).toBe(
    'GPU 0 97 % · 38.9/40 GiB (busiest of 2)'
  );
});

it('is red when a GPU memory is nearly full, amber with an alert', () => {
  expect(gpuSummary(sample([gpu(0, 10, 39)])).level).toBe('error');
  const alert = { id: 'a', message: 'GPU 0 idle for 10 min' } as ISample['alerts'][number];
  const alerted = gpuSummary(sample([gpu(0, 0, 1)], { alerts: [alert] }));
  expect(alerted.level).toBe('warning');
  expect(alerted.title).toContain('GPU 0 idle for 10 min');
});

it('says why there is no GPU', () => {
  expect(gpuSummary(sample([], { gpu_error: 'NVML cannot be loaded' }))).toMatchObject({
    text: 'No GPU',
    title: 'NVML cannot be loaded'
  });
  expect(gpuSummary(null).text).toBe('GPU …');
});

it("reads the system's CPU and memory, or nothing before a sample", () => {
  const system = { cpu_percent: 12, memory_used: 3.1 * GiB, memory_total: 15.5 * GiB } as ISystem;
  expect(systemSummary(system)).toBe('CPU 12 % · 3.1/15.5 GiB');
  expect(systemSummary(undefined)).toBe('');
});
