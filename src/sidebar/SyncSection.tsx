import React from 'react';

import { IJob, IPendingList, ISyncStatus, IWorkspaces } from '../api';
import { takeOver, useWorkspace } from '../sync/actions';
import { SyncModel } from '../sync/model';
import { LOCAL_STORE_ADVICE, persistResult, progressText, syncSummary } from '../sync/words';
import { count, duration, percent, shortPath, size, span } from '../vocabulary';
import { Bar } from './Bar';
import { liveNow } from '../reach';

/** Sync: state, what is pending (and why) or when all was saved, faults with their reasons,
 * the lease, the quota, a persist's progress, and the workspaces of the store when this one is
 * new. (Persist now is in the panel's header; Cancel in this section's title bar.) */
export function SyncSection(props: { model: SyncModel }): JSX.Element {
  const { model } = props;
  const status = model.status;
  const now = liveNow();
  const job = model.currentPersist;
  const running = job?.state === 'running';
  // Files counted only while they move: never "0 of 0 files" while a checkpoint or a snapshot runs.
  const uploading =
    running &&
    !!job?.steps.some(s => s.name === 'sync' && s.state === 'running') &&
    job.progress.files_total > 0;
  const listable = !!status && (status.pending_files > 0 || (status.problem_files ?? 0) > 0);
  return (
    <>
      {status?.store && (
        <div
          className="jp-gpuws-line jp-gpuws-subtle jp-gpuws-store"
          title={`${status.store}/${status.workspace}`}
        >
          {status.store}/{status.workspace}
        </div>
      )}
      {model.error && !(status?.last_error ?? '').includes(model.error) && (
        // One box per fault: a request that failed for the fault the status shows says nothing more.
        <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>
      )}
      <div
        className={`jp-gpuws-sync-summary jp-gpuws-sync-${status?.state ?? 'unknown'}`}
        data-testid="gpuws-sync-summary"
      >
        {syncSummary(status, now, job)}
      </div>
      {listable && (
        <button
          className="jp-gpuws-link"
          data-testid="gpuws-pending-toggle"
          aria-expanded={model.showPending}
          onClick={() => void model.togglePending()}
        >
          {model.showPending ? 'Hide the list' : pendingLinkText(status)}
        </button>
      )}
      {model.showPending && <PendingList listing={model.pending} />}
      {status &&
        !model.showPending &&
        (status.problem_files ?? 0) > 0 &&
        status.pending_files === 0 && (
          <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-sync-problems">
            {count(status.problem_files ?? 0, 'file')} cannot be synced: see the list.
          </div>
        )}
      {status && <Faults status={status} now={now} onTakeOver={() => void takeOver(model)} />}
      {status?.store_same_disk && (status.state === 'idle' || status.state === 'syncing') && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-local-store">
          {LOCAL_STORE_ADVICE}
        </div>
      )}
      {status?.encryption && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-sync-encrypted">
          encrypted ({status.encryption.cipher})
        </div>
      )}
      {model.workspaces && status && (
        <WorkspaceChooser workspaces={model.workspaces} status={status} model={model} />
      )}
      {status?.quota_bytes ? (
        <Bar
          label="Store quota"
          value={percent(storeUsage(status), status.quota_bytes)}
          text={`${size(storeUsage(status))} / ${size(status.quota_bytes)}`}
          capacity
          testId="gpuws-quota"
        />
      ) : null}
      {status?.quota_warning && (
        <div className="jp-gpuws-message jp-gpuws-warning">{status.quota_warning}</div>
      )}
      {status && (status.synced_files ?? 0) > 0 && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-store-usage">
          In the store: {count(status.synced_files ?? 0, 'file')}, {size(status.store_bytes ?? 0)}
          {status.versions_bytes ? ` + ${size(status.versions_bytes)} of previous versions` : ''}
        </div>
      )}
      {status?.watch && (status.watch.error || status.watch.limited) && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-watch-warning">
          {status.watch.error
            ? `${status.watch.error}. Changes are found`
            : 'Some folders are not watched: the system allows no more (fs.inotify.max_user_watches). Changes in them are found'}{' '}
          by the rescan every {duration(status.watch.rescan_interval)}, or by Persist now.
        </div>
      )}
      {!running && status?.progress && (
        <Bar
          label="Syncing"
          value={progressShare(status.progress)}
          text={progressText(status.progress)}
          testId="gpuws-sync-progress"
        />
      )}
      {running && job && !job.cancelling && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-persist-activity">
          {job.activity ?? 'Persisting…'}
        </div>
      )}
      {running && job?.cancelling && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-persist-cancelling">
          Cancelling: the persist stops after its current step ({stepWords(job)}). What is uploaded
          stays uploaded.
        </div>
      )}
      {running && job && !job.cancelling && (
        <Bar
          label="Persisting"
          value={uploading ? progressShare(job.progress) : null}
          text={uploading ? progressText(job.progress) : stepCount(job)}
          testId="gpuws-persist-progress"
        />
      )}
      {job && job.state !== 'running' && job.finished && <PersistResult job={job} now={now} />}
    </>
  );
}

/** A finished persist in one coherent line (the server's summary): what was done, what failed
 * and why, coloured by how it ended; never "failed" beside "up to date" as two stories. */
function PersistResult(props: { job: IJob; now: number }): JSX.Element {
  const { job, now } = props;
  const result = persistResult(job);
  const look =
    result.level === 'ok'
      ? 'jp-gpuws-line jp-gpuws-subtle'
      : `jp-gpuws-message jp-gpuws-${result.level}`;
  return (
    <div className={look} data-testid="gpuws-persist-result">
      Last persist {span(now - (job.finished ?? now))} ago: {result.short}
    </div>
  );
}

/** "step 2 of 5": where a persist is while its step has no files to count. */
function stepCount(job: IJob): string {
  const index = job.steps.findIndex(s => s.state === 'running');
  return index < 0 ? '' : `step ${index + 1} of ${job.steps.length}`;
}

/** Every fault with its reason, and Take over where it helps. */
function Faults(props: { status: ISyncStatus; now: number; onTakeOver: () => void }): JSX.Element {
  const { status, now } = props;
  const holder = status.lease;
  const takeOver = status.can_take_over && (
    <button
      className="jp-mod-styled jp-gpuws-button"
      data-testid="gpuws-take-over"
      onClick={props.onTakeOver}
    >
      {status.store_missing ? 'Start anew' : 'Take over'}
    </button>
  );
  return (
    <>
      {status.last_error && status.state !== 'read-only' && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-sync-error">
          {status.last_error}
          {status.state === 'error' && takeOver}
          {status.error_detail && (
            <details className="jp-gpuws-detail" data-testid="gpuws-sync-error-detail">
              <summary>Details</summary>
              {status.error_detail}
            </details>
          )}
        </div>
      )}
      {status.state === 'read-only' && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-read-only">
          {holder
            ? `${holder.user}@${holder.host} (pid ${holder.pid}) writes this workspace. `
            : ''}
          {status.takeover_at && status.takeover_at > now
            ? `This runtime restores, reads, and takes over by itself once that runtime stops renewing its lease: ${duration(holder?.ttl ?? 0)} after its last renewal, by the store's clock or this machine's (in ${duration(status.takeover_at - now)} if it renews no more).`
            : status.read_only_reason}
          {takeOver}
        </div>
      )}
      {status.state === 'taking-over' && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-taking-over">
          Taken over: the previous runtime stops writing; this one writes in{' '}
          {duration(status.writes_start_in ?? 0)}, once its time is up.
        </div>
      )}
      {status.lease_held && status.lease_exclusive === false && status.lease_note && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-lease-advisory">
          Only one runtime should write this workspace, but {status.lease_note}.
        </div>
      )}
      {status.record_rebuilt && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-record-rebuilt">
          {status.record_rebuilt}
        </div>
      )}
      {(status.ignore_problems ?? []).map(problem => (
        <div
          key={problem}
          className="jp-gpuws-message jp-gpuws-warning"
          data-testid="gpuws-ignore-problem"
        >
          {problem}
        </div>
      ))}
      {(status.ignore_rules_count ?? 0) > 0 && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-ignore-rules">
          Left out by .gpuwsignore: {(status.ignore_rules ?? []).join(', ')}
          {(status.ignore_rules_count ?? 0) > (status.ignore_rules ?? []).length
            ? ` and ${(status.ignore_rules_count ?? 0) - (status.ignore_rules ?? []).length} more`
            : ''}
        </div>
      )}
      {(status.store_skipped_count ?? 0) > 0 && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-store-skipped">
          {count(status.store_skipped_count ?? 0, 'entry')} of the store{' '}
          {status.store_skipped_count === 1 ? 'is' : 'are'} skipped, never followed nor read:{' '}
          {Object.entries(status.store_skipped ?? {})
            .slice(0, 3)
            .map(([key, why]) => `${key} (${why})`)
            .join('; ')}
        </div>
      )}
    </>
  );
}

/** The pending files, each with why, like jupyterlab-git's list of changes; then the files
 * that cannot be synced, with the reason. */
function PendingList(props: { listing: IPendingList | null }): JSX.Element {
  const { listing } = props;
  if (!listing) {
    return <div className="jp-gpuws-line jp-gpuws-subtle">Loading…</div>;
  }
  const more = listing.total - listing.files.length;
  return (
    <div className="jp-gpuws-pending-list" data-testid="gpuws-pending-list">
      <ul className="jp-gpuws-pending-files">
        {listing.files.map(file => (
          <li key={file.path} className={`jp-gpuws-pending-${file.state}`} title={file.path}>
            <span className="jp-gpuws-pending-path">{shortPath(file.path)}</span>
            <span className="jp-gpuws-pending-state">
              {STATE_WORDS[file.state]}
              {file.state !== 'deleting' && ` · ${size(file.size)}`}
            </span>
            {file.error && <div className="jp-gpuws-pending-error">{file.error}</div>}
            {!file.error && file.note && <div className="jp-gpuws-pending-note">{file.note}</div>}
          </li>
        ))}
      </ul>
      {more > 0 && <div className="jp-gpuws-line jp-gpuws-subtle">and {more} more</div>}
      {listing.problems_total > 0 && (
        <>
          <div className="jp-gpuws-line" data-testid="gpuws-problem-title">
            {count(listing.problems_total, 'file')} cannot be synced
          </div>
          <ul className="jp-gpuws-pending-files">
            {listing.problems.map(problem => (
              <li key={problem.path} className="jp-gpuws-pending-problem" title={problem.path}>
                <span className="jp-gpuws-pending-path">{problem.path}</span>
                <div className="jp-gpuws-pending-error">{problem.reason}</div>
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}

/** When this workspace is new and empty while the store holds others (a fresh machine where the
 * project folder has another name or path): the others, with their size and last write. */
function WorkspaceChooser(props: {
  workspaces: IWorkspaces;
  status: ISyncStatus;
  model: SyncModel;
}): JSX.Element | null {
  const { workspaces, status, model } = props;
  const others = workspaces.workspaces.filter(w => w.name !== workspaces.current);
  if (workspaces.current_files > 0 || (status.synced_files ?? 0) > 0 || !others.length) {
    return null;
  }
  const now = liveNow();
  return (
    <div className="jp-gpuws-message jp-gpuws-info" data-testid="gpuws-workspace-chooser">
      This workspace, <b>{workspaces.current}</b>, is new. The store holds{' '}
      {count(others.length, 'other')}:
      <ul className="jp-gpuws-workspaces">
        {others.slice(0, 8).map(w => (
          <li key={w.name}>
            <span className="jp-gpuws-workspace-name" title={w.name}>
              {w.name}
            </span>
            <span className="jp-gpuws-subtle">
              {count(w.files, 'file')}
              {w.more ? '+' : ''}, {size(w.bytes)}
              {w.last_write ? `, written ${span(now - w.last_write)} ago` : ''}
              {w.host ? ` on ${w.host}` : ''}
            </span>
            <button
              className="jp-mod-styled jp-gpuws-button"
              onClick={() => void useWorkspace(model, w.name)}
            >
              Use
            </button>
          </li>
        ))}
      </ul>
    </div>
  );
}

const STATE_WORDS: { [state: string]: string } = {
  waiting: 'waiting',
  writing: 'being written',
  uploading: 'uploading',
  failing: 'failing',
  deleting: 'to remove'
};

function pendingLinkText(status: ISyncStatus | null): string {
  if (!status) {
    return '';
  }
  const parts = [];
  if (status.pending_files) {
    parts.push(`Show the ${count(status.pending_files, 'pending file')}`);
  }
  if (status.problem_files) {
    parts.push(
      `${status.pending_files ? '' : 'Show the '}${count(status.problem_files, 'file')} that cannot be synced`
    );
  }
  return parts.join(' and ');
}

function storeUsage(status: ISyncStatus): number {
  return (status.store_bytes ?? 0) + (status.versions_bytes ?? 0);
}

const STEP_WORDS: { [step: string]: string } = {
  documents: 'saving the open documents',
  checkpoints: 'the tracked notebooks’ checkpoints',
  environment: 'the environment snapshot',
  git: 'the Git commit',
  sync: 'the upload'
};

/** The persist's step still running, in words: what a cancel waits for. */
function stepWords(job: IJob): string {
  const step = job.steps.find(s => s.state === 'running');
  return step ? (STEP_WORDS[step.name] ?? step.name) : 'the current step';
}

function progressShare(p: IJob['progress']): number | null {
  return p.bytes_total
    ? percent(p.bytes_done, p.bytes_total)
    : percent(p.files_done, p.files_total);
}
