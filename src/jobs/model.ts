// The user's jobs (polled): each one's state, reason, progress and log; what the panel can do
// to one now (stop, restart, hold, approve), and a notebook or a script started as a job, in a new
// run of its own or continuing one. And the jobs run elsewhere (a cluster's pod) that the server
// finds in the store, which can be brought home.
import {
  bringHome,
  holdJob,
  IBringHome,
  IElsewhereJob,
  ITrainingRun,
  ITrainingState,
  IUserJob,
  IUserJobs,
  listJobs,
  requestAPI,
  restartJob,
  startJob,
  stopJob
} from '../api';
import { PolledModel } from '../polled';
import { shown } from '../shown';
import { actionVerb } from './words';

/** How many of a job's last log lines the panel shows. */
export const LOG_LINES = 5;

/** The states in which a job's process runs, or is about to. */
const ACTIVE = ['queued', 'running', 'relaunched', 'retrying'];

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

  /** Run a notebook or a Python script of the work directory as a job (`scriptJob`), in a new
   * run of its own or continuing `resume`; throws with the server's reason. */
  async runFile(path: string, resume: string | null = null): Promise<IUserJob> {
    const what = path.endsWith('.ipynb') ? { notebook: path } : scriptJob(path);
    const job = await startJob(resume ? { ...what, resume } : what);
    await this.refresh();
    return job;
  }

  /** The runs a new job may continue, as the server lists them now, the jobs looked at again
   * too (a failure: none, and the job starts a new run). */
  async resumableRuns(): Promise<IResumableRun[]> {
    try {
      const [training] = await Promise.all([
        requestAPI<ITrainingState>('training'),
        this.refresh()
      ]);
      return resumableRuns(training.runs, this.jobs);
    } catch {
      return [];
    }
  }
}

/** A run a job may continue: its name and its newest checkpoint's step. */
export interface IResumableRun {
  run: string;
  step: number;
}

/** The runs with a checkpoint that no active job writes (the server refuses a second writer),
 * newest first as the Training section lists them. */
export function resumableRuns(runs: ITrainingRun[], jobs: IUserJob[]): IResumableRun[] {
  const written = new Set(jobs.filter(job => ACTIVE.includes(job.state)).map(job => job.run));
  return runs
    .filter(run => typeof run.checkpoint?.step === 'number' && !written.has(run.run))
    .map(run => ({ run: run.run, step: run.checkpoint?.step as number }));
}

/** A Python script as a job: `python NAME` in the script's folder, as it would be run from a
 * terminal there (`jupyter gpuws run -- python NAME`). */
export function scriptJob(path: string): { command: string[]; cwd: string } {
  const slash = path.lastIndexOf('/');
  return { command: ['python', path.slice(slash + 1)], cwd: path.slice(0, Math.max(slash, 0)) };
}

/** Whether the job is under way (or about to be): it belongs near the top of the panel. */
export function jobActive(job: IUserJob, pending: string[]): boolean {
  return ACTIVE.includes(job.state) || job.needs_approval || pending.includes(job.id);
}

/** The buttons a job offers now. */
export function jobActions(job: IUserJob, pending: string[]): JobAction[] {
  // A record this runtime cannot vouch for runs nothing until the user approves it: no Restart.
  if (job.needs_approval) {
    return ['approve'];
  }
  const actions: JobAction[] = [];
  const due = pending.includes(job.id);
  if (ACTIVE.includes(job.state)) {
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
