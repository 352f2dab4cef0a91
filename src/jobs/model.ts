// The user's jobs (polled): each one's state, reason, progress and log; what the panel can do
// to one now (stop, restart, hold, approve), and a notebook or a script started as a job. And the
// jobs run elsewhere (a cluster's pod) that the server finds in the store, which can be brought
// home.
import {
  bringHome,
  holdJob,
  IBringHome,
  IElsewhereJob,
  IUserJob,
  IUserJobs,
  listJobs,
  restartJob,
  startJob,
  stopJob
} from '../api';
import { PolledModel } from '../polled';
import { shown } from '../shown';
import { actionVerb } from './words';

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

  /** The jobs run elsewhere, as the server last found their areas in the store. */
  get elsewhere(): IElsewhereJob[] {
    return this.state?.elsewhere?.jobs ?? [];
  }

  /** What the last Bring home did (shown until the next one), and of which job. */
  homecoming: { job: IElsewhereJob; answer: IBringHome } | null = null;

  /** Bring a job run elsewhere home; a refusal shows in the section with its reason. */
  async bringHome(job: IElsewhereJob): Promise<IBringHome | null> {
    this.busy.add(job.id);
    this.actionError = null;
    this._changed.emit();
    let answer: IBringHome | null = null;
    try {
      answer = await bringHome(job.id);
      this.homecoming = { job, answer };
    } catch (error) {
      this.actionError = `Cannot bring ${shown(job.name)} home: ${(error as Error).message}`;
    } finally {
      this.busy.delete(job.id);
    }
    await this.refresh();
    return answer;
  }

  /** Jobs the next runtime (or this one, once its restore ends) relaunches by itself. */
  get pending(): string[] {
    return this.state?.relaunch.pending ?? [];
  }

  protected async load(): Promise<void> {
    this.state = await listJobs();
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
      this.actionError = `Cannot ${actionVerb(action)} ${shown(job.name)}: ${(error as Error).message}`;
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

  /** Run a notebook or a Python script of the work directory as a job (`scriptJob`); throws with
   * the server's reason. */
  async runFile(path: string): Promise<IUserJob> {
    const job = await startJob(path.endsWith('.ipynb') ? { notebook: path } : scriptJob(path));
    await this.refresh();
    return job;
  }
}

/** A Python script as a job: `python NAME` in the script's folder, as it would be run from a
 * terminal there (`jupyter gpuws run -- python NAME`). */
export function scriptJob(path: string): { command: string[]; cwd: string } {
  const slash = path.lastIndexOf('/');
  return { command: ['python', path.slice(slash + 1)], cwd: path.slice(0, Math.max(slash, 0)) };
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
