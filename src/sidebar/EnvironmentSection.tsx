import React from 'react';

import { EnvironmentModel } from '../environment/model';
import { count, percent } from '../vocabulary';
import { STORE_FAULT } from '../sync/words';
import { Bar } from './Bar';

function when(epoch: number): string {
  return new Date(epoch * 1000).toLocaleString(undefined, {
    day: 'numeric',
    month: 'short',
    hour: '2-digit',
    minute: '2-digit'
  });
}

/** Environment: matches the snapshot of <date>, or the diff; CUDA / driver / GPU warnings;
 * a snapshot or restore in progress and the installer's last line (Snapshot now and Restore are
 * the section's toolbar buttons). */
export function EnvironmentSection(props: { model: EnvironmentModel }): JSX.Element {
  const { model } = props;
  const env = model.state;
  const job = model.job;
  const running = job?.state === 'running';
  const d = env?.diff;
  const log: string[] = job?.result?.log ?? [];
  return (
    <>
      {env?.current?.python && (
        <div className="jp-gpuws-line jp-gpuws-subtle jp-gpuws-ellipsis" title={env.python}>
          Python {env.current.python.version}
          {env.current.torch?.version ? ` · torch ${env.current.torch.version}` : ''}
        </div>
      )}
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {env?.error && env.state !== 'error' && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-env-refused">
          {env.store_fault ? STORE_FAULT : env.error}
        </div>
      )}
      <div
        className={`jp-gpuws-line jp-gpuws-env-${env?.state ?? 'unknown'}`}
        data-testid="gpuws-env-summary"
      >
        {!env || env.state === 'capturing'
          ? 'Reading the environment…'
          : env.state === 'error'
            ? `Cannot read the environment: ${env.store_fault ? STORE_FAULT : env.error}`
            : env.state === 'no-snapshot'
              ? env.error && !env.store_fault
                ? "The store's latest snapshot cannot be used (why is above): Snapshot now takes a new one"
                : 'No snapshot yet: Persist now or Snapshot now takes one'
              : env.state === 'matches'
                ? `Matches the snapshot of ${when(env.latest!.captured_at)}`
                : `Differs from the snapshot of ${when(env.latest!.captured_at)}`}
      </div>
      {env?.state === 'differs' && d && (
        <ul className="jp-gpuws-env-diff" data-testid="gpuws-env-diff">
          {d.removed.map(p => (
            <li key={`-${p.name}`} title="In the snapshot, not installed here">
              − {p.name} {p.version}
            </li>
          ))}
          {d.changed.map(p => (
            <li
              key={`~${p.name}`}
              title={`${p.from_version} in the snapshot, ${p.to_version} here`}
            >
              ~ {p.name} {p.from_version} → {p.to_version}
            </li>
          ))}
          {d.added.map(p => (
            <li key={`+${p.name}`} title="Installed here since the snapshot">
              + {p.name} {p.version}
            </li>
          ))}
        </ul>
      )}
      {env?.compatibility
        .filter(v => v.level === 'warn' || v.level === 'error')
        .map(v => (
          <div
            key={v.message}
            className={`jp-gpuws-message jp-gpuws-${v.level === 'error' ? 'error' : 'warning'}`}
            data-testid="gpuws-env-verdict"
          >
            {v.message}
          </div>
        ))}
      {running && job && (
        <>
          <Bar
            label={
              job.kind === 'env-restore'
                ? `${job.progress.files_done} of ${job.progress.files_total ? count(job.progress.files_total, 'package') : '… packages'}`
                : 'Taking a snapshot'
            }
            value={percent(job.progress.files_done, job.progress.files_total || null)}
            text={job.progress.current ?? ''}
            testId="gpuws-env-progress"
          />
          {log.length > 0 && (
            <div className="jp-gpuws-env-log">{plainText(log[log.length - 1])}</div>
          )}
        </>
      )}
      {job && job.state === 'failed' && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-env-error">
          {job.kind === 'env-restore' ? 'Restore' : 'Snapshot'} failed: {job.errors.join('; ')}
        </div>
      )}
    </>
  );
}

/** An installer's line without its terminal colours (uv writes ANSI escapes even into a pipe). */
function plainText(line: string): string {
  // eslint-disable-next-line no-control-regex
  return line.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '');
}
