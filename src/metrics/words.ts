// The GPUs and the system in a few words: what the status bar and the folded GPUs and System
// sections say.
import { IGpu, ISample, ISystem } from '../api';
import { IWord, Level, percent, percentText, usage } from '../vocabulary';

/** GPUs whose utilisation or memory differ by this many points read as different. */
const DIFFERENT = 20;

function memoryShare(gpu: IGpu): number {
  return percent(gpu.memory_used, gpu.memory_total) ?? 0;
}

/** How hard a GPU works: its utilisation or its memory use, whichever is higher. */
function load(gpu: IGpu): number {
  return Math.max(gpu.utilization ?? 0, memoryShare(gpu));
}

/** What the status bar says about the GPUs: "GPU 47 % · 39.9/80 GiB"; with several that
 * differ, the busiest: "GPU 0 97 % · 38.9/40 GiB (busiest of 2)". */
export function gpuSummary(sample: ISample | null): IWord {
  if (!sample) {
    return { text: 'GPU …', title: 'Waiting for the first sample', level: 'none' };
  }
  const gpus = sample.gpus;
  const alerts = sample.alerts.map(alert => alert.message);
  const level: Level = gpus.some(g => memoryShare(g) >= 95)
    ? 'error'
    : alerts.length
      ? 'warning'
      : 'none';
  if (gpus.length === 0) {
    return {
      text: 'No GPU',
      title: [sample.gpu_error ?? 'No GPU found', ...alerts].join('\n'),
      level
    };
  }
  const lines = gpus.map(
    g =>
      `GPU ${g.index} ${g.name}: ${percentText(g.utilization)} · ${usage(g.memory_used, g.memory_total)}`
  );
  const title = [...lines, ...alerts].join('\n');
  if (gpus.length === 1) {
    const g = gpus[0];
    return {
      text: `GPU ${percentText(g.utilization)} · ${usage(g.memory_used, g.memory_total)}`,
      title,
      level
    };
  }
  const utils = gpus.map(g => g.utilization ?? 0);
  const shares = gpus.map(memoryShare);
  const spread = (values: number[]) => Math.max(...values) - Math.min(...values);
  if (spread(utils) < DIFFERENT && spread(shares) < DIFFERENT) {
    const used = gpus.reduce((sum, g) => sum + (g.memory_used ?? 0), 0);
    const total = gpus.reduce((sum, g) => sum + (g.memory_total ?? 0), 0);
    const mean = utils.reduce((a, b) => a + b, 0) / utils.length;
    return {
      text: `${gpus.length} GPUs ${percentText(mean)} · ${usage(used, total)}`,
      title,
      level
    };
  }
  const busiest = gpus.reduce((a, b) => (load(b) > load(a) ? b : a));
  return {
    text: `GPU ${busiest.index} ${percentText(busiest.utilization)} · ${usage(busiest.memory_used, busiest.memory_total)} (busiest of ${gpus.length})`,
    title,
    level
  };
}

/** The folded System section's words: "CPU 12 % · 3.1/15.5 GiB"; empty before a sample. */
export function systemSummary(system: ISystem | null | undefined): string {
  return system
    ? `CPU ${percentText(system.cpu_percent)} · ${usage(system.memory_used, system.memory_total)}`
    : '';
}
