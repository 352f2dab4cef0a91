// A run of processes of its own in the user's words (the Checkpoints section's run card): what
// it is (a job's one process, or torchrun's ranks), whether its ranks are worth a line, and its
// newest checkpoint. A job's name comes from the store: shown() escapes it.
import { IDistributedRun } from '../api';
import { shown } from '../shown';
import { count, size, span } from '../vocabulary';

type RunCheckpoint = IDistributedRun['checkpoints'][number];

/** Whether the run is a job's one plain process rather than ranks of torch.distributed. */
export function isJobProcess(run: IDistributedRun): boolean {
  return run.kind === 'process';
}

/** What the run is, after its name: "job train · running", "torchrun · 4 ranks · sharded",
 * "not running". */
export function runHow(run: IDistributedRun): string {
  if (isJobProcess(run)) {
    const job = run.job_name ?? run.job;
    const who = job ? `job ${shown(job)}` : 'one process';
    return `${who} · ${run.live ? 'running' : 'not running'}`;
  }
  if (!run.live) {
    return 'not running';
  }
  const ranks = run.ranks ?? [];
  const spread = run.mesh?.parallelism;
  return `torchrun · ${count(run.world_size ?? ranks.length, 'rank')}${spread ? ` · ${spread}` : ''}`;
}

/** The ranks to list, one each: none for a job's one process (its rank 0 says nothing). */
export function shownRanks(run: IDistributedRun): NonNullable<IDistributedRun['ranks']> {
  return isJobProcess(run) ? [] : (run.ranks ?? []);
}

/** A rank's state in a word: "training", "writing", "ending". */
export function rankState(rank: NonNullable<IDistributedRun['ranks']>[number]): string {
  if (rank.terminating) {
    return 'ending';
  }
  return !rank.phase || rank.phase === 'idle' ? 'training' : rank.phase;
}

/** The newest checkpoint before whether it is in the store: "step 400 · 12 s ago · 18.6 KiB"
 * (a torchrun run's also "on 2 ranks (9.3 KiB + 9.3 KiB)"); null when there is none. */
export function newestCheckpointText(run: IDistributedRun, now: number): string | null {
  const newest: RunCheckpoint | undefined = run.checkpoints[0];
  if (!newest) {
    return null;
  }
  const text = `step ${newest.step} · ${span(now - newest.time)} ago · ${size(newest.bytes)}`;
  return isJobProcess(run)
    ? text
    : `${text} on ${count(newest.world_size, 'rank')} (${newest.bytes_per_rank.map(size).join(' + ')})`;
}
