// The sync in the user's words: the summary line, a persist's progress and outcome, and the few
// words with a tone that the status bar and the panel's header show.
import { IJob, IPersistSummary, ISyncStatus } from '../api';
import { ago, clock, count, fill, IWord, size, span, WORDS } from '../vocabulary';
import { liveNow } from '../reach';
import { SyncModel } from './model';

/** What a cancelled persist does until the step under way ends (a checkpoint, a browser's save). */
export const CANCELLING = 'Cancelling: the persist stops once its current step ends';

/** What to do when the store is a folder on the work directory's own disk (the words a
 * persist's summary ends with there too). */
export const LOCAL_STORE_ADVICE: string = WORDS.persist.local_advice;

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

/** The longest message a JupyterLab notification shows whole (it cuts the rest). */
export const TOAST_MAX = 140;

/** A persist's outcome in a notification: the short line whole where it fits, else cut at the
 * last whole clause that fits, so the headline and what was done come first (the whole text is
 * one click away, under Details). */
export function toastText(short: string): string {
  if (short.length <= TOAST_MAX) {
    return short;
  }
  // The last ", ", "; " or ". " outside brackets: never inside a list of names "(a, b, …".
  const room = short.slice(0, TOAST_MAX - 1);
  let cut = -1;
  let depth = 0;
  for (let i = 0; i < room.length - 1; i++) {
    const c = room[i];
    depth += c === '(' ? 1 : c === ')' && depth > 0 ? -1 : 0;
    if (depth === 0 && (c === ',' || c === ';' || c === '.') && room[i + 1] === ' ') {
      cut = i;
    }
  }
  return `${cut > 0 ? room.slice(0, cut) : room.trimEnd()}…`;
}

/** "all saved 12 s ago", "3 files, 120 MiB pending", … in the user's words. Never "all saved"
 * unless nothing is pending, no pass runs and the store is somewhere that outlives this
 * machine. `persist` is the persist the page shows (SyncModel.currentPersist, which the status
 * bar reads too; by default the sync status's own): while it runs, the line says so, also over
 * the files it is about to upload. */
export function syncSummary(
  status: ISyncStatus | null,
  now: number,
  persist: IJob | null | undefined = status?.persist
): string {
  if (!status) {
    return 'Sync: …';
  }
  switch (status.state) {
    case 'starting':
      if (status.starting) {
        return `Starting: ${status.starting}…`;
      }
      return status.restoring
        ? 'Restoring from the store…'
        : 'Starting: opening the store and restoring…';
    case 'disabled':
      return 'Sync is turned off';
    case 'taking-over':
      return `Taking over: writing starts in ${clock(status.writes_start_in ?? 0)}`;
    case 'read-only': {
      const who = status.lease ? `${status.lease.user}@${status.lease.host}` : 'another runtime';
      if (status.takeover_at) {
        const left = status.takeover_at - now;
        return left > 0
          ? `Read-only: ${who} writes; taking over in ${clock(left)} unless it renews`
          : `Read-only: ${who} stopped; taking over…`;
      }
      return `Read-only: ${who} writes this workspace`;
    }
  }
  const pending =
    status.pending_files > 0
      ? `${count(status.pending_files, 'file')}, ${size(status.pending_bytes)} pending`
      : '';
  if (status.store_down) {
    return `${status.store_missing ? 'Store unavailable' : 'Store not answering'}${pending ? `: ${pending}` : ''}`;
  }
  if (persist?.state === 'running') {
    // Not "all saved" yet: the persist's checkpoints, snapshot and commit are still to come.
    return persist.cancelling ? 'Cancelling the persist…' : 'Persisting…';
  }
  if (pending) {
    return pending;
  }
  if (status.state === 'error') {
    // A fault at start that may go by itself: the sync tries again, and says when.
    return status.starting ? `Not started: ${status.starting}` : 'Sync error';
  }
  if (status.state === 'syncing' || status.progress) {
    return 'Syncing…';
  }
  if (status.lease_error) {
    return 'The lease is not renewed: writing stops if it runs out (below)';
  }
  if (status.last_sync) {
    return status.store_same_disk
      ? `Copied to this machine's disk ${span(now - status.last_sync)} ago, not saved elsewhere`
      : `All saved ${span(now - status.last_sync)} ago`;
  }
  return 'Nothing synced yet';
}

/** "12 of 40 files · 30 MiB of 120 MiB · 8.2 MiB/s · 0:11 left". */
export function progressText(p: IJob['progress']): string {
  const parts = [`${p.files_done} of ${count(p.files_total, 'file')}`];
  if (p.bytes_total) {
    parts.push(`${size(p.bytes_done)} of ${size(p.bytes_total)}`);
  }
  if (p.speed) {
    parts.push(`${size(p.speed)}/s`);
  }
  if (p.eta !== null && p.eta !== undefined && p.speed) {
    parts.push(`${clock(p.eta)} left`);
  }
  return parts.join(' · ');
}

/** The sync in a few words and a level, for the status bar and the panel's header: "synced
 * 2 min ago" (never "saved": beside a notebook with unsaved changes that would read as if the
 * notebook were saved), "3 pending", "store down". The same rule as `%gpuws status`. */
export function syncWord(sync: SyncModel): IWord {
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
  const job = sync.currentPersist;
  const title = status.last_error ?? status.read_only_reason ?? syncSummary(status, liveNow(), job);
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
  if (status.lease_error) {
    // Still writing while the lease lasts, but its renewal fails: not "synced" beside it.
    return { text: words.lease_unrenewed, title, level: 'warning' };
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
      text: fill(words.synced, { age: ago(liveNow() - status.last_sync) }),
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

/** What another section says where its error is the store's fault the Sync section shows: one
 * box per fault, not the same words three times. */
export const STORE_FAULT =
  'The store cannot be used now: the Sync section says why and what to do.';
