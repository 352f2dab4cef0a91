// The user's jobs (polled): each one's state, reason, progress and log; what the panel can do
// to one (stop, restart, hold, approve); "Run as job" for a notebook; their words and colours.
import { Notification } from '@jupyterlab/apputils';

import { holdJob, IUserJob, IUserJobs, listJobs, restartJob, startJob, stopJob } from './api';
import { shortPath } from './format';
import { PolledModel } from './polled';
import { formatCount } from './training';
import { count, duration } from './vocabulary';

/** How many of a job's last log lines the panel shows. */
export const LOG_LINES = 5;

export type JobAction = 'stop' | 'restart' | 'hold' | 'release' | 'approve';

export class JobsModel extends PolledModel {
  state: IUserJobs | null = null;
  /** The last action that failed, with the server's message, until the next action. */
  actionError: string | null = null;
  /** Jobs with a request of this page under way: their buttons wait for it. */
  busy = new Set<string>();
  /** Jobs whose log lines the user folded away. */
  foldedLogs = new Set<string>();

  constructor() {
    super(3000, 30000);
  }

  get jobs(): IUserJob[] {
    return this.state?.jobs ?? [];
  }

  /** Jobs the next runtime (or this one, once its restore ends) relaunches by itself. */
  get pending(): string[] {
    return this.state?.relaunch.pending ?? [];
  }

  async refresh(): Promise<void> {
    try {
      this.state = await listJobs();
      this.error = null;
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  /** Ask the server to do `action` to a job; a refusal shows in the section with its reason. */
  async act(job: IUserJob, action: JobAction): Promise<void> {
    this.busy.add(job.id);
    this.actionError = null;
    this._changed.emit();
    try {
      switch (action) {
        case 'stop':
          await stopJob(job.id);
          break;
        case 'restart':
        case 'approve':
          // The server's approval of a record it cannot vouch for is a restart by the user.
          await restartJob(job.id);
          break;
        case 'hold':
        case 'release':
          await holdJob(job.id, action === 'hold');
          break;
      }
    } catch (error) {
      this.actionError = `Cannot ${ACTION_VERBS[action]} ${job.name}: ${(error as Error).message}`;
    } finally {
      this.busy.delete(job.id);
    }
    await this.refresh();
  }

  toggleLog(id: string): void {
    if (!this.foldedLogs.delete(id)) {
      this.foldedLogs.add(id);
    }
    this._changed.emit();
  }

  /** Run a notebook of the work directory as a job; the notification names it and leads to the
   * panel. The job, or null when the server refused (the reason in a notification). */
  async runNotebook(path: string, openPanel: () => void): Promise<IUserJob | null> {
    let job: IUserJob;
    try {
      job = await startJob({ notebook: path });
    } catch (error) {
      Notification.error(`Cannot run ${shortPath(path)} as a job: ${(error as Error).message}`, {
        autoClose: false
      });
      return null;
    }
    const outputs = job.output ? `, its outputs written into ${shortPath(job.output)}` : '';
    Notification.success(
      `Job "${job.name}" started: it runs on the server, without this page${outputs}`,
      {
        autoClose: 8000,
        actions: [{ label: 'Show in GPU Workspace', callback: openPanel }]
      }
    );
    await this.refresh();
    return job;
  }
}

const ACTION_VERBS: { [action in JobAction]: string } = {
  stop: 'stop',
  restart: 'restart',
  hold: 'hold',
  release: 'stop holding',
  approve: 'approve'
};

/** The job's state in a word or two: its state, or "needs approval" before a relaunch this runtime
 * cannot vouch for. */
export function jobStateWord(job: IUserJob): string {
  return job.needs_approval ? 'needs approval' : job.state;
}

/** The colour of a job's state word: the panel's ok / pending / error / subtle styles. */
export function jobTone(job: IUserJob): 'ok' | 'pending' | 'error' | 'none' {
  if (job.needs_approval) {
    return 'pending';
  }
  switch (job.state) {
    case 'running':
    case 'relaunched':
    case 'finished':
      return 'ok';
    case 'interrupted':
    case 'retrying':
    case 'held':
      return 'pending';
    case 'failed':
      return 'error';
    default:
      return 'none';
  }
}

/** Whether the job is under way (or about to be): it belongs near the top of the panel. */
export function jobActive(job: IUserJob, pending: string[]): boolean {
  return (
    ['queued', 'running', 'relaunched', 'retrying'].includes(job.state) ||
    job.needs_approval ||
    pending.includes(job.id)
  );
}

/** The buttons a job offers now. */
export function jobActions(job: IUserJob, pending: string[]): JobAction[] {
  // A record this runtime cannot vouch for runs nothing until the user approves it: no Restart.
  if (job.needs_approval) {
    return ['approve'];
  }
  const actions: JobAction[] = [];
  const due = pending.includes(job.id);
  if (['queued', 'running', 'relaunched', 'retrying'].includes(job.state)) {
    actions.push('stop');
  }
  if (job.state === 'held') {
    actions.push('release');
  } else if (job.state === 'interrupted' || due) {
    actions.push('hold');
  }
  if (
    ['finished', 'failed', 'stopped', 'held'].includes(job.state) ||
    (job.state === 'interrupted' && !due)
  ) {
    actions.push('restart');
  }
  return actions;
}

/** What the job runs, as the user recognises it: the notebook, or the command's script. */
export function jobWhat(job: IUserJob): string {
  if (job.notebook) {
    return shortPath(job.notebook);
  }
  return job.command.find(part => /\.(py|sh|ipynb)$/.test(part)) ?? job.command.join(' ');
}

/** "step 4,120/10,000", or null before the job's run has a step. */
export function jobStepText(job: IUserJob): string | null {
  if (job.step === null) {
    return null;
  }
  return job.total_steps
    ? `step ${formatCount(job.step)}/${formatCount(job.total_steps)}`
    : `step ${formatCount(job.step)}`;
}

/** "ETA 13 min" while the job runs and its run has one. */
export function jobEtaText(job: IUserJob): string | null {
  const running = ['running', 'relaunched'].includes(job.state);
  return running && job.eta_seconds !== null ? `ETA ${duration(job.eta_seconds)}` : null;
}

/** "train.py will be relaunched from step 4,120 once the restore ends", while a relaunch is due. */
export function relaunchText(job: IUserJob): string {
  const from = job.step !== null ? ` from step ${formatCount(job.step)}` : '';
  return `${jobWhat(job)} will be relaunched${from} once the restore ends`;
}

/** The folded section's few words: "1 running · 1 failed", "1 to relaunch". */
export function jobsSummary(jobs: IUserJob[], pending: string[]): string {
  const words = new Map<string, number>();
  for (const job of jobs) {
    const word =
      pending.includes(job.id) && job.state === 'interrupted' ? 'to relaunch' : jobStateWord(job);
    words.set(word, (words.get(word) ?? 0) + 1);
  }
  if (words.size > 2) {
    return count(jobs.length, 'job');
  }
  return [...words].map(([word, n]) => `${n} ${word}`).join(' · ');
}
