import React from 'react';

import { formatBytes, formatDuration, percent } from '../format';
import { IJob } from '../api';
import { formatAge, persistSummary, SyncModel, syncSummary, unansweredPages } from '../sync';
import { Bar } from './Bar';

/** Sync: state, what is pending or when all was saved, errors, quota, and Persist now. */
export function SyncSection(props: { model: SyncModel }): JSX.Element {
  const { model } = props;
  const status = model.status;
  const now = Date.now() / 1000;
  const job = latestPersist(model.job, status?.persist);
  const running = job?.state === 'running';
  const savingDocuments = running && job?.steps.some(s => s.name === 'documents' && s.state === 'running');
  const leaseExpired = !!status?.lease && status.lease.expires < now;
  return (
    <section className="jp-gpuws-section" aria-label="Sync">
      <h3 className="jp-gpuws-section-title">
        Sync
        {status?.store && (
          <span className="jp-gpuws-subtle jp-gpuws-store" title={`${status.store}/${status.workspace}`}>
            {status.store}
          </span>
        )}
      </h3>
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      <div className="jp-gpuws-sync-row">
        <span
          className={`jp-gpuws-sync-summary jp-gpuws-sync-${status?.state ?? 'unknown'}`}
          data-testid="gpuws-sync-summary"
        >
          {syncSummary(status, now)}
        </span>
        <span className="jp-gpuws-persist">
          {running && (
            <button className="jp-mod-styled jp-gpuws-button" onClick={() => void model.cancel(job?.id)}>
              Cancel
            </button>
          )}
          <button
            className="jp-mod-styled jp-mod-accept jp-gpuws-button"
            data-testid="gpuws-persist"
            disabled={running || !status || ['starting', 'disabled', 'read-only'].includes(status.state)}
            onClick={() => void model.persist()}
            title="Save every open document, then upload everything: the work directory reaches the store"
          >
            {running ? 'Persisting…' : 'Persist now'}
          </button>
        </span>
      </div>
      {status?.last_error && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-sync-error">
          {status.last_error}
        </div>
      )}
      {status?.state === 'read-only' && status.read_only_reason && (
        <div className="jp-gpuws-message jp-gpuws-warning">
          {status.read_only_reason}
          {leaseExpired && (
            <button className="jp-mod-styled jp-gpuws-button" onClick={() => void model.takeOver()}>
              Take over
            </button>
          )}
        </div>
      )}
      {status?.quota_bytes ? (
        <Bar
          label="Store quota"
          value={percent(status.store_bytes ?? 0, status.quota_bytes)}
          text={`${formatBytes(status.store_bytes ?? 0)} / ${formatBytes(status.quota_bytes)}`}
          capacity
          testId="gpuws-quota"
        />
      ) : null}
      {status?.quota_warning && <div className="jp-gpuws-message jp-gpuws-warning">{status.quota_warning}</div>}
      {status?.watch && (status.watch.error || status.watch.limited) && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-watch-warning">
          {status.watch.error
            ? `${status.watch.error}. Changes are found`
            : 'Some folders are not watched: the system allows no more (fs.inotify.max_user_watches). Changes in them are found'}{' '}
          by the rescan every {formatDuration(status.watch.rescan_interval)}, or by Persist now.
        </div>
      )}
      {savingDocuments && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-persist-documents">
          Saving the open documents…
        </div>
      )}
      {running && job && !savingDocuments && (
        <Bar
          label={`${job.progress.files_done} of ${job.progress.files_total} files`}
          value={
            job.progress.bytes_total
              ? percent(job.progress.bytes_done, job.progress.bytes_total)
              : percent(job.progress.files_done, job.progress.files_total)
          }
          text={`${formatBytes(job.progress.bytes_done)} / ${formatBytes(job.progress.bytes_total)}`}
          testId="gpuws-persist-progress"
        />
      )}
      {job && job.state === 'failed' && (
        <div className="jp-gpuws-message jp-gpuws-error">Persist failed: {job.errors.join('; ')}</div>
      )}
      {job && job.state !== 'running' && job.finished && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-persist-result">
          Last persist {formatAge(now - job.finished)} ago
          {persistSummary(job) ? `: ${persistSummary(job)}` : ''}
        </div>
      )}
      {job && job.state !== 'running' && unansweredPages(job) && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-persist-unanswered">
          {unansweredPages(job)}
        </div>
      )}
    </section>
  );
}

/** The newer of the persist this page follows and the latest the server ran (the automatic
 * persist, another browser's). */
function latestPersist(mine: IJob | null, latest: IJob | null | undefined): IJob | null {
  if (!mine || !latest) {
    return mine ?? latest ?? null;
  }
  return latest.started > mine.started ? latest : mine;
}
