// The browser's view of the sync: its status (polled), and the Persist now job it runs.
import { Notification } from '@jupyterlab/apputils';

import { IDocumentsReport, IJob, ISyncStatus, requestAPI } from './api';
import { PolledModel } from './polled';
import { formatBytes } from './format';

export class SyncModel extends PolledModel {
  status: ISyncStatus | null = null;
  /** The persist job this page started or found running. */
  job: IJob | null = null;

  constructor() {
    super(2000, 30000);
  }

  async refresh(): Promise<void> {
    try {
      this.status = await requestAPI<ISyncStatus>('sync');
      this.error = null;
    } catch (error) {
      this.error = (error as Error).message;
    }
    this._changed.emit();
  }

  get persisting(): boolean {
    return this.job?.state === 'running';
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
        job = await requestAPI<IJob>(`persist/${job.id}`);
      } catch (error) {
        job = { ...job, state: 'failed', errors: [(error as Error).message] };
      }
      this.job = job;
      this._changed.emit();
      const p = job.progress;
      if (job.state === 'running' && p.files_total) {
        Notification.update({
          id: note,
          message: `Persisting: ${p.files_done} of ${p.files_total} files, ${formatBytes(p.bytes_done)} of ${formatBytes(p.bytes_total)}`
        });
      }
    }
    await this.refresh();
    const unanswered = unansweredPages(job);
    if (job.state === 'done' && !unanswered) {
      Notification.update({
        id: note,
        type: 'success',
        message: `All saved: ${persistSummary(job)}.`,
        autoClose: 5000
      });
    } else if (job.state === 'done') {
      // Not "all saved": a page that did not answer may hold unsaved documents.
      Notification.update({
        id: note,
        type: 'warning',
        message: `Persisted: ${persistSummary(job)}. ${unanswered}`,
        autoClose: false
      });
    } else if (job.state === 'cancelled') {
      Notification.update({ id: note, type: 'warning', message: 'Persist cancelled. What was uploaded stays uploaded.', autoClose: 5000 });
    } else {
      const done = persistSummary(job);
      Notification.update({
        id: note,
        type: 'error',
        message: `Persist failed: ${job.errors.join('; ')}.${done ? ` Done: ${done}.` : ''}`,
        autoClose: false
      });
    }
    return job;
  }

  /** Cancel a running persist: the one shown (which may be another browser's or the
   * automatic one), by default this page's. */
  async cancel(jobId?: string): Promise<void> {
    const id = jobId ?? (this.job?.state === 'running' ? this.job.id : null);
    if (id) {
      await requestAPI<IJob>(`persist/${id}`, { method: 'DELETE' });
    }
  }

  async takeOver(): Promise<void> {
    try {
      await requestAPI('sync/lease', { method: 'POST', body: JSON.stringify({ take_over: true }) });
      Notification.success('This runtime now writes the workspace.', { autoClose: 5000 });
    } catch (error) {
      Notification.error(`Cannot take over: ${(error as Error).message}`, { autoClose: false });
    }
    await this.refresh();
  }

}

/** What a persist did, in a few words: "1 document saved, 3 files uploaded (2.0 KiB)", or
 * "1 document saved, the store was already up to date". The
 * documents that could not be saved fail the persist, and its errors name them. */
export function persistSummary(job: IJob): string {
  const parts: string[] = [];
  const documents: IDocumentsReport | undefined = job.result.documents;
  if (documents?.saved.length) {
    parts.push(`${plural(documents.saved.length, 'document')} saved`);
  }
  if (job.result.uploaded) {
    parts.push(`${plural(job.result.uploaded, 'file')} uploaded (${formatBytes(job.result.bytes_uploaded ?? 0)})`);
  } else if (job.result.uploaded === 0) {
    // The background sync may have carried the saved documents already: "0 files" would
    // read as if they had not reached the store.
    parts.push('the store was already up to date');
  }
  return parts.join(', ');
}

/** The pages that did not answer a persist's request to save, or '' when all did. */
export function unansweredPages(job: IJob): string {
  const pages: string[] = job.result.documents?.unanswered ?? [];
  if (!pages.length) {
    return '';
  }
  return (
    `${plural(pages.length, 'browser page')} did not answer (${names(pages)}): ` +
    'documents open there may be unsaved.'
  );
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

function names(items: string[]): string {
  return items.slice(0, 3).join(', ') + (items.length > 3 ? ` and ${items.length - 3} more` : '');
}

/** "all saved 12 s ago", "3 files, 120 MiB pending", … in the user's words. */
export function syncSummary(status: ISyncStatus | null, now: number): string {
  if (!status) {
    return 'Sync: …';
  }
  switch (status.state) {
    case 'starting':
      return 'Starting: opening the store and restoring…';
    case 'disabled':
      return 'Sync is turned off';
    case 'read-only':
      return 'Read-only: another runtime writes this workspace';
  }
  if (status.pending_files > 0) {
    return `${status.pending_files} file${status.pending_files === 1 ? '' : 's'}, ${formatBytes(status.pending_bytes)} pending`;
  }
  if (status.state === 'error') {
    return 'Sync error';
  }
  if (status.state === 'syncing') {
    return 'Syncing…';
  }
  if (status.last_sync) {
    return `All saved ${formatAge(now - status.last_sync)} ago`;
  }
  return 'Nothing synced yet';
}

export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) {
    return `${s} s`;
  }
  if (s < 5400) {
    return `${Math.round(s / 60)} min`;
  }
  return `${Math.round(s / 3600)} h`;
}
