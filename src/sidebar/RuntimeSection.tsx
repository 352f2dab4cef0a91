import React from 'react';

import { IGitStatus, IPlatform, IRuntimeState } from '../api';
import { RuntimeModel } from '../runtime/model';
import { clock, count, deadlineSource, duration, span } from '../vocabulary';
import { Bar } from './Bar';
import { liveNow } from '../reach';

/** Seconds without activity before the Runtime section says idle (less is a pause). */
const IDLE_SHOWN = 60;

/** Runtime: the countdown and what ends it, a bar of time used, idle time, the next automatic
 * persist, emergencies, a release in progress (Persist and release is in the header's ⋯ menu). */
export function RuntimeSection(props: { model: RuntimeModel }): JSX.Element {
  const { model } = props;
  const state = model.state;
  const now = model.now();
  const left = model.remaining();
  return (
    <>
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {state && left !== null && state.deadline ? (
        <>
          <div className="jp-gpuws-countdown-row">
            <div
              className={`jp-gpuws-countdown jp-gpuws-countdown-${left <= 120 ? 'critical' : left <= state.persist_lead_time ? 'high' : 'normal'}`}
              data-testid="gpuws-countdown"
              title={`Ends ${new Date(state.deadline * 1000).toLocaleString()}`}
            >
              {clock(left)} <span className="jp-gpuws-subtle">left</span>
            </div>
            {state.source && (
              <span
                className="jp-gpuws-subtle jp-gpuws-ellipsis"
                title="What ends the runtime first"
              >
                {deadlineSource(state.source)}
              </span>
            )}
          </div>
          <Bar
            label="Time used"
            value={Math.min(
              100,
              (100 * (now - state.start)) / Math.max(1, state.deadline - state.start)
            )}
            text={`${duration(now - state.start)} of ${duration(state.deadline - state.start)}`}
            capacity
            testId="gpuws-runtime-bar"
          />
          {state.next_persist && (
            <div className="jp-gpuws-line" data-testid="gpuws-next-persist">
              {state.auto_persist
                ? `Automatic persist ${state.auto_persist.state === 'running' ? 'running' : state.auto_persist.state}`
                : state.next_persist > now
                  ? `Automatic persist in ${duration(state.next_persist - now)}`
                  : 'Automatic persist due'}
            </div>
          )}
        </>
      ) : (
        state && (
          <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-countdown">
            No known end: running for {duration(now - state.start)}
          </div>
        )
      )}
      {/* Idle: nothing from the browser or any kernel for a minute at least (a kernel running
          code is never idle); an idle shutdown's time, whenever one is set. */}
      {((state?.idle_seconds ?? 0) >= IDLE_SHOWN || !!state?.idle_deadline) && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-idle">
          {(state?.idle_seconds ?? 0) >= IDLE_SHOWN
            ? `Idle for ${duration(state!.idle_seconds!)}`
            : 'Active'}
          {state?.idle_deadline ? `; idle shutdown in ${duration(state.idle_deadline - now)}` : ''}
        </div>
      )}
      {state?.platform && <PlatformLines platform={state.platform} state={state} now={now} />}
      {state?.emergency && (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-emergency">
          {deadlineSource(state.emergency.reason)}: emergency persist {state.emergency.state}
          {state.emergency.pending_count
            ? `, ${state.emergency.pending_count} files not persisted`
            : ''}
        </div>
      )}
      {state?.preemption_watch && state.preemption_watch.watching.length > 0 && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-preemption-watch">
          Watching for{' '}
          {state.preemption_watch.watching
            .map(cloud => deadlineSource(`preemption:${cloud}`))
            .join(', ')}{' '}
          notices
        </div>
      )}
      {Object.entries(state?.preemption_watch?.errors ?? {}).map(([cloud, error]) => (
        <div
          key={cloud}
          className="jp-gpuws-message jp-gpuws-warning"
          data-testid="gpuws-preemption-error"
        >
          Cannot read {deadlineSource(`preemption:${cloud}`)} notices: {error}. A notice would go
          unseen; SIGTERM still triggers the emergency persist.
        </div>
      ))}
      {state?.errors.map(error => (
        <div key={error} className="jp-gpuws-message jp-gpuws-warning">
          {error}
        </div>
      ))}
      {state?.release?.state === 'kept' && (
        <div className="jp-gpuws-message jp-gpuws-error">Not released: {state.release.error}</div>
      )}
      {state?.release && state.release.state !== 'kept' && (
        <div className="jp-gpuws-line" data-testid="gpuws-releasing">
          Releasing: persisting everything, then the server stops…
        </div>
      )}
    </>
  );
}

/** JupyterHub and Kubernetes: the hub's limits, keep-alive, and the grace before the kill. */
function PlatformLines(props: {
  platform: IPlatform;
  state: IRuntimeState;
  now: number;
}): JSX.Element {
  const { platform, state, now } = props;
  const hub = platform.jupyterhub;
  const grace = platform.grace;
  const keep = platform.keep_alive;
  const hubSources = state.sources.filter(s => s.source.startsWith('hub:'));
  return (
    <>
      {hub && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-hub">
          JupyterHub server of {hub.user}
          {hub.server_name ? `/${hub.server_name}` : ''}
          {hubSources.map(s => (
            <span key={s.source} title={s.detail ?? undefined}>
              {' · '}
              {deadlineSource(s.source)} in {duration(Math.max(0, s.at - now))}
            </span>
          ))}
        </div>
      )}
      {hub?.error && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-hub-error">
          Cannot read this server's times from JupyterHub: {hub.error}
        </div>
      )}
      {keep.enabled && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-keep-alive">
          Keep-alive:{' '}
          {keep.active ? `reporting activity (${keep.reason})` : 'idle, nothing reported'}
          {keep.error ? ` · ${keep.error}` : ''}
        </div>
      )}
      {(platform.kubernetes || grace.seconds !== null) && (
        <div className="jp-gpuws-line jp-gpuws-subtle" data-testid="gpuws-grace">
          {grace.seconds !== null
            ? `The server gets ${grace.seconds} s to stop (${grace.source})`
            : 'The grace before the pod is killed is not known'}
          {grace.emergency_seconds !== null
            ? `; the emergency persist takes ${grace.emergency_seconds.toFixed(1)} s (${grace.emergency_measured_by})`
            : ''}
        </div>
      )}
      {grace.warning && (
        <div className="jp-gpuws-message jp-gpuws-warning" data-testid="gpuws-grace-warning">
          {grace.warning}
        </div>
      )}
    </>
  );
}

/** Git: branch, last commit, uncommitted files, push state and the last error. */
export function GitSection(props: { git: IGitStatus }): JSX.Element {
  const { git } = props;
  const now = liveNow();
  return (
    <div data-testid="gpuws-git">
      <div className="jp-gpuws-line">
        {git.branch ?? (git.repository ? 'detached' : 'no repository yet')}
        {git.uncommitted ? ` · ${git.uncommitted} uncommitted` : ''}
        {git.push?.state && git.push.state !== 'disabled' ? ` · push ${git.push.state}` : ''}
      </div>
      {git.filtered ? (
        <div
          className="jp-gpuws-line jp-gpuws-subtle"
          title="Their attributes name a filter driver (git-lfs, say); filters never run for automatic commits, so commit these yourself"
        >
          {count(git.filtered, 'file')} with a filter driver left out
        </div>
      ) : null}
      {git.waiting && <div className="jp-gpuws-line jp-gpuws-subtle">{git.waiting}</div>}
      {git.last_commit && (
        <div className="jp-gpuws-line jp-gpuws-subtle" title={git.last_commit.message}>
          {git.last_commit.sha.slice(0, 7)} {git.last_commit.message.split('\n')[0]} (
          {span(now - git.last_commit.time)} ago)
        </div>
      )}
      {git.last_error && <div className="jp-gpuws-message jp-gpuws-error">{git.last_error}</div>}
    </div>
  );
}
