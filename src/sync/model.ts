// The browser's view of the sync: its status, the pending files while their list is open, the
// store's workspaces (polled), and the Persist now job this page follows.
import { IJob, IPendingList, ISyncStatus, IWorkspaces, requestAPI } from '../api';
import { PolledModel } from '../polled';

/** How often the sync's status is asked (ms); twice a second while a pass is under way: its
 * progress moves, and a store that stops answering under it (named 3 to 3.5 s after) shows
 * within 5 s, with room for a loaded machine. */
export const SYNC_INTERVAL = 2000;
export const SYNC_INTERVAL_PASSING = 500;

export class SyncModel extends PolledModel {
  status: ISyncStatus | null = null;
  /** The persist job this page started or found running. */
  job: IJob | null = null;
  /** The pending files with why, while the list is open in the panel. */
  pending: IPendingList | null = null;
  showPending = false;
  /** The store's workspaces, asked once the sync runs (and after a switch). */
  workspaces: IWorkspaces | null = null;
  /** Set once a release has persisted everything: the last word, as the server is gone. */
  released = false;

  constructor() {
    super(SYNC_INTERVAL, 30000);
  }

  protected async load(): Promise<void> {
    this.status = await requestAPI<ISyncStatus>('sync');
    const passing = this.status.state === 'syncing' || !!this.status.progress;
    // Takes effect from the next look on.
    this.poll.frequency = {
      ...this.poll.frequency,
      interval: passing ? SYNC_INTERVAL_PASSING : SYNC_INTERVAL
    };
    if (this.showPending) {
      this.pending = await requestAPI<IPendingList>('sync/pending?limit=200');
    }
    const listable =
      ['idle', 'syncing', 'read-only', 'error'].includes(this.status.state) &&
      !this.status.store_missing;
    if (this.workspaces === null && listable) {
      const listing = await requestAPI<IWorkspaces>('sync/workspaces');
      this.workspaces = Array.isArray(listing?.workspaces) ? listing : null;
    }
  }

  /** Open or close the list of pending files. */
  async togglePending(): Promise<void> {
    this.showPending = !this.showPending;
    this.pending = null;
    this._changed.emit();
    if (this.showPending) {
      await this.refresh();
    }
  }

  /** Mirror this work directory to another workspace of the store from now on; throws with the
   * server's reason when it refuses. */
  async useWorkspace(name: string): Promise<void> {
    try {
      this.workspaces = await requestAPI<IWorkspaces>('sync/workspaces/use', {
        method: 'POST',
        body: JSON.stringify({ name })
      });
    } finally {
      await this.refresh();
    }
  }

  get persisting(): boolean {
    return this.job?.state === 'running';
  }

  /** The newer of the persist this page follows and the latest the server ran (the automatic
   * persist, another browser's). */
  get currentPersist(): IJob | null {
    const mine = this.job;
    const latest = this.status?.persist;
    if (!mine || !latest) {
      return mine ?? latest ?? null;
    }
    return latest.started > mine.started ? latest : mine;
  }

  /** The release persisted everything and the server is stopping: say so, then stop asking. */
  finish(): void {
    this.released = true;
    this._changed.emit();
    this.dispose();
  }

  /** Start (or join) the server's persist job; throws with the server's reason. */
  async startPersist(): Promise<IJob> {
    const job = await requestAPI<IJob>('persist', { method: 'POST', body: '{}' });
    this.job = job;
    this._changed.emit();
    return job;
  }

  /** Follow a persist to its end, each look handed to `seen`; then look at the sync again. */
  async followPersist(job: IJob, seen: (job: IJob) => void = () => undefined): Promise<IJob> {
    const end = await this.follow(
      job,
      300,
      // An emergency persist (SIGTERM, a preemption notice) may have taken over from this one
      // before its sync: follow that one to the end.
      current => requestAPI<IJob>(`persist/${current.result?.superseded_by ?? current.id}`),
      current => {
        this.job = current;
        this._changed.emit();
        seen(current);
      }
    );
    await this.refresh();
    return end;
  }

  /** Cancel a running persist: the one shown (which may be another browser's or the
   * automatic one), by default this page's. */
  async cancel(jobId?: string): Promise<void> {
    const id = jobId ?? (this.job?.state === 'running' ? this.job.id : null);
    if (id) {
      const job = await requestAPI<IJob>(`persist/${id}`, { method: 'DELETE' });
      if (this.job?.id === job.id) {
        this.job = job; // "cancelling" at once, not at the next look
        this._changed.emit();
      }
    }
  }

  /** Become the writer of the workspace (or start a missing store anew); throws with the
   * server's reason when it refuses. */
  async takeOver(): Promise<void> {
    try {
      await requestAPI('sync/lease', { method: 'POST', body: JSON.stringify({ take_over: true }) });
    } finally {
      await this.refresh();
    }
  }
}
