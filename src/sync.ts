// The browser's view of the sync: its status (polled), and the Persist now job it runs.
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { IJob, IPendingList, IPersistSummary, ISyncStatus, IWorkspaces, requestAPI } from './api';
import { PolledModel } from './polled';
import { formatBytes, formatClock } from './format';
import { ago, count, fill, span, WORDS } from './vocabulary';

/** What a cancelled persist does until the step under way ends (a checkpoint, a browser's save). */
export const CANCELLING = 'Cancelling: the persist stops once its current step ends';

/** What to do when the store is a folder on the work directory's own disk (the words a
 * persist's summary ends with there too). */
export const LOCAL_STORE_ADVICE: string = WORDS.persist.local_advice;

export class SyncModel extends PolledModel {
  status: ISyncStatus | null = null;
  /** The persist job this page started or found running. */
  job: IJob | null = null;
  /** The pending files with why, while the list is open in the panel. */
  pending: IPendingList | null = null;
  showPending = false;
  /** The store's workspaces, asked once the sync runs (and after a switch). */
  workspaces: IWorkspaces | null = null;

  constructor() {
    super(2000, 30000);
  }

  async refresh(): Promise<void> {
    try {
      this.status = await requestAPI<ISyncStatus>('sync');
      this.error = null;
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
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
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

  /** Switch this work directory to another workspace of the store (after a confirmation). */
  async useWorkspace(name: string): Promise<void> {
    const answer = await showDialog({
      title: `Use the workspace ${name}?`,
      body:
        `This folder will be mirrored to ${name} from now on (remembered on this machine), ` +
        'and what it holds comes back here. Nothing is deleted anywhere.',
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Use it' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      this.workspaces = await requestAPI<IWorkspaces>('sync/workspaces/use', {
        method: 'POST',
        body: JSON.stringify({ name })
      });
      Notification.success(
        `This folder now uses the workspace ${name}; its files are coming back.`,
        {
          autoClose: 5000
        }
      );
    } catch (error) {
      Notification.error(`Cannot use ${name}: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
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

  /** Set once a release has persisted everything: the last word, as the server is gone. */
  released = false;

  /** The release persisted everything and the server is stopping: say so, then stop asking. */
  finish(): void {
    this.released = true;
    this._changed.emit();
    this.dispose();
  }

  /** Persist now: start (or join) the server's persist job and follow it to the end. */
  async persist(): Promise<IJob | null> {
    let job: IJob;
    try {
      job = await requestAPI<IJob>('persist', { method: 'POST', body: '{}' });
    } catch (error) {
      Notification.error(`Persist failed: ${(error as Error).message}`, { autoClose: false });
      return null;
    }
    const note = Notification.emit('Persisting the workspace…', 'in-progress', {
      autoClose: false
    });
    this.job = job;
    this._changed.emit();
    while (job.state === 'running' && !this.isDisposed) {
      await new Promise(resolve => setTimeout(resolve, 300));
      try {
        // An emergency persist (SIGTERM, a preemption notice) may have taken over from this
        // one before its sync: follow that one to the end.
        const successor: string | null | undefined = job.result?.superseded_by;
        job = await requestAPI<IJob>(`persist/${successor ?? job.id}`);
      } catch (error) {
        job = { ...job, state: 'failed', errors: [(error as Error).message] };
      }
      this.job = job;
      this._changed.emit();
      if (job.state === 'running' && job.cancelling) {
        Notification.update({ id: note, message: `${CANCELLING}…` });
      } else if (job.state === 'running' && job.activity) {
        Notification.update({ id: note, message: `${job.activity}…` });
      }
    }
    await this.refresh();
    // The server's one wording of the outcome, as %gpuws persist and jupyter gpuws persist say
    // it: "All saved" only for a store that outlives this machine.
    const summary = persistResult(job);
    Notification.update({
      id: note,
      type: summary.level === 'ok' ? 'success' : summary.level,
      message: summary.text,
      autoClose: summary.level === 'ok' || job.state === 'cancelled' ? 5000 : false
    });
    return job;
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

  /** Become the writer: from a live holder only after the user confirms. */
  async takeOver(): Promise<void> {
    const status = this.status;
    const holder = status?.lease;
    const live = !!holder && !!status?.takeover_at && status.takeover_at > Date.now() / 1000;
    if (status?.store_missing) {
      const answer = await showDialog({
        title: 'Start the store anew here?',
        body:
          `${status.store_down ?? 'The store is missing.'} Only if it is not coming back: this runtime ` +
          'makes the folder again and uploads every file of this work directory into it. If it is on a ' +
          'drive that is not mounted, mount it instead: the sync goes on by itself.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Start anew' })]
      });
      if (!answer.button.accept) {
        return;
      }
    } else if (live && holder) {
      const answer = await showDialog({
        title: 'Take over this workspace?',
        body:
          `${holder.user}@${holder.host} is still writing it. Taking over stops it from writing ` +
          'within seconds; this runtime writes once its time is up, after bringing back what the ' +
          'store holds. Files it changes meanwhile are kept as previous versions.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Take over' })]
      });
      if (!answer.button.accept) {
        return;
      }
    }
    try {
      await requestAPI('sync/lease', { method: 'POST', body: JSON.stringify({ take_over: true }) });
      Notification.success('This runtime now writes the workspace: it restores, then syncs.', {
        autoClose: 5000
      });
    } catch (error) {
      Notification.error(`Cannot take over: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }
}

/** A finished persist's outcome: the server's summary (vocabulary.persist_summary), or, for a
 * job that ended without one (the server went away), its state and errors. */
export function persistResult(job: IJob): Pick<IPersistSummary, 'level' | 'text' | 'short'> {
  const summary = job.result.summary;
  if (summary) {
    return summary;
  }
  const text = `Persist ${job.state}${job.errors.length ? `: ${job.errors.join('; ')}` : ''}.`;
  return { level: job.state === 'done' ? 'warning' : 'error', text, short: text };
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** "all saved 12 s ago", "3 files, 120 MiB pending", … in the user's words. Never "all saved"
 * unless nothing is pending, no pass runs and the store is somewhere that outlives this
 * machine. */
export function syncSummary(status: ISyncStatus | null, now: number): string {
  if (!status) {
    return 'Sync: …';
  }
  switch (status.state) {
    case 'starting':
      return status.restoring
        ? 'Restoring from the store…'
        : 'Starting: opening the store and restoring…';
    case 'disabled':
      return 'Sync is turned off';
    case 'taking-over':
      return `Taking over: writing starts in ${formatClock(status.writes_start_in ?? 0)}`;
    case 'read-only': {
      const who = status.lease ? `${status.lease.user}@${status.lease.host}` : 'another runtime';
      if (status.takeover_at) {
        const left = status.takeover_at - now;
        return left > 0
          ? `Read-only: ${who} writes; taking over in ${formatClock(left)} unless it renews`
          : `Read-only: ${who} stopped; taking over…`;
      }
      return `Read-only: ${who} writes this workspace`;
    }
  }
  const pending =
    status.pending_files > 0
      ? `${plural(status.pending_files, 'file')}, ${formatBytes(status.pending_bytes)} pending`
      : '';
  if (status.store_down) {
    return `${status.store_missing ? 'Store unavailable' : 'Store not answering'}${pending ? `: ${pending}` : ''}`;
  }
  if (pending) {
    return pending;
  }
  if (status.state === 'error') {
    return 'Sync error';
  }
  if (status.state === 'syncing' || status.progress) {
    return 'Syncing…';
  }
  if (status.persist?.state === 'running') {
    // Not "all saved" yet: the persist's checkpoints, snapshot and commit are still to come.
    return status.persist.cancelling ? 'Cancelling the persist…' : 'Persisting…';
  }
  if (status.last_sync) {
    return status.store_same_disk
      ? `Copied to this machine's disk ${formatAge(now - status.last_sync)} ago, not saved elsewhere`
      : `All saved ${formatAge(now - status.last_sync)} ago`;
  }
  return 'Nothing synced yet';
}

/** "12 of 40 files · 30 MiB of 120 MiB · 8.2 MiB/s · 0:11 left". */
export function progressText(p: IJob['progress']): string {
  const parts = [`${p.files_done} of ${count(p.files_total, 'file')}`];
  if (p.bytes_total) {
    parts.push(`${formatBytes(p.bytes_done)} of ${formatBytes(p.bytes_total)}`);
  }
  if (p.speed) {
    parts.push(`${formatBytes(p.speed)}/s`);
  }
  if (p.eta !== null && p.eta !== undefined && p.speed) {
    parts.push(`${formatClock(p.eta)} left`);
  }
  return parts.join(' · ');
}

/** How long ago, without "ago": "12 s", "4 min", "3 h" (the vocabulary's rule). */
export function formatAge(seconds: number): string {
  return span(seconds);
}

export type Level = 'ok' | 'pending' | 'warning' | 'error' | 'none';

/** The sync in a few words and a level, for the status bar and the panel's header: "synced
 * 2 min ago" (never "saved": beside a notebook with unsaved changes that would read as if the
 * notebook were saved), "3 pending", "store down". The same rule as `%gpuws status`. */
export function syncWord(sync: SyncModel): { text: string; title: string; level: Level } {
  const words = WORDS.sync;
  if (sync.released) {
    return {
      text: words.all_synced,
      title: 'Everything was persisted before the release',
      level: 'ok'
    };
  }
  const status = sync.status;
  if (!status) {
    return { text: '', title: sync.error ?? '', level: 'none' };
  }
  const title =
    status.last_error ?? status.read_only_reason ?? syncSummary(status, Date.now() / 1000);
  const job = sync.currentPersist;
  if (job?.state === 'running' && job.cancelling) {
    return { text: words.cancelling, title: CANCELLING, level: 'pending' };
  }
  if (job?.state === 'running') {
    const p = job.progress;
    const share = p.bytes_total ? Math.floor((100 * p.bytes_done) / p.bytes_total) : null;
    return {
      text: share === null ? words.persisting : `${words.persisting} ${share} %`,
      title,
      level: 'pending'
    };
  }
  if (status.state === 'error') {
    return { text: status.store_down ? words.store_down : words.error, title, level: 'error' };
  }
  if (status.state === 'read-only' || status.state === 'taking-over') {
    return { text: words[status.state], title, level: 'warning' };
  }
  if (status.pending_files > 0) {
    return {
      text: fill(words.pending, { count: status.pending_files.toLocaleString('en-US') }),
      title,
      level: 'pending'
    };
  }
  if (status.store_same_disk && status.last_sync) {
    // Not "synced": the store is on this machine's own disk and goes with it.
    return { text: words.local_only, title: LOCAL_STORE_ADVICE, level: 'warning' };
  }
  if (status.last_sync && !status.progress) {
    return {
      text: fill(words.synced, { age: ago(Date.now() / 1000 - status.last_sync) }),
      title,
      level: 'ok'
    };
  }
  if (status.progress || status.state === 'syncing') {
    return { text: words.syncing, title, level: 'none' };
  }
  const known = words as { [state: string]: string };
  return {
    text: known[status.state] ?? (status.state === 'idle' ? words.never : status.state),
    title,
    level: 'none'
  };
}
