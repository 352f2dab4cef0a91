import React from 'react';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';

import { ISample } from './api';
import { formatBytes } from './format';
import { MetricsModel } from './metrics';
import { RuntimeModel, runtimeWord } from './runtime';
import { SyncModel, formatAge } from './sync';

/** The status bar's few words on the sync. */
export function syncWord(sync: SyncModel): { text: string; title: string; level: string } {
  if (sync.released) {
    return { text: 'all saved', title: 'Everything was persisted before the release', level: 'ok' };
  }
  const status = sync.status;
  if (!status) {
    return { text: '', title: '', level: 'none' };
  }
  const title = status.last_error ?? status.read_only_reason ?? `Store: ${status.store ?? ''}`;
  if (status.state === 'error') {
    return { text: status.store_down ? 'store down' : 'sync error', title, level: 'error' };
  }
  if (status.state === 'read-only' || status.state === 'taking-over') {
    return { text: status.state, title, level: 'warning' };
  }
  if (status.pending_files > 0) {
    return { text: `${status.pending_files} pending`, title, level: 'pending' };
  }
  if (status.store_same_disk && status.last_sync) {
    // Not "synced": the store is on this machine's own disk and goes with it.
    return { text: 'local store only', title: 'The store is a folder on this machine\'s own disk', level: 'warning' };
  }
  if (status.last_sync && !status.progress) {
    return { text: `synced ${formatAge(Date.now() / 1000 - status.last_sync)} ago`, title, level: 'ok' };
  }
  return { text: status.progress ? 'syncing' : status.state, title, level: 'none' };
}

/** What the status bar says about the GPUs: mean utilisation and memory in use. */
export function gpuSummary(sample: ISample | null): { text: string; title: string } {
  if (!sample) {
    return { text: 'GPU …', title: 'Waiting for the first sample' };
  }
  const gpus = sample.gpus;
  if (gpus.length === 0) {
    return { text: 'No GPU', title: sample.gpu_error ?? 'No GPU found' };
  }
  const utils = gpus.map(g => g.utilization).filter((u): u is number => u !== null);
  const used = gpus.reduce((sum, g) => sum + (g.memory_used ?? 0), 0);
  const total = gpus.reduce((sum, g) => sum + (g.memory_total ?? 0), 0);
  const util = utils.length
    ? `${Math.round(utils.reduce((a, b) => a + b, 0) / utils.length)}%`
    : '—';
  const label = gpus.length > 1 ? `${gpus.length} GPUs` : 'GPU';
  return {
    text: `${label} ${util} · ${formatBytes(used)} / ${formatBytes(total)}`,
    title: gpus
      .map(
        g =>
          `GPU ${g.index} ${g.name}: ${g.utilization ?? '—'}% · ${formatBytes(g.memory_used)} / ${formatBytes(g.memory_total)}`
      )
      .join('\n')
  };
}

/** A few coloured words (nothing when there is nothing to say). */
function StatusWord(props: { word: { text: string; title: string; level: string }; kind: string }): JSX.Element {
  const { text, title, level } = props.word;
  return text ? (
    <span
      className={`jp-gpuws-status-text jp-gpuws-status-${props.kind} jp-gpuws-status-${level}`}
      data-testid={`gpuws-status-${props.kind}`}
      title={title}
    >
      {text}
    </span>
  ) : (
    <span />
  );
}

/** The status-bar item; a click opens the panel. */
export class GpuStatusItem extends ReactWidget {
  constructor(
    private _model: MetricsModel,
    private _sync: SyncModel,
    private _runtime: RuntimeModel,
    private _onClick: () => void
  ) {
    super();
    this.addClass('jp-gpuws-status');
  }

  render(): JSX.Element {
    return (
      <span className="jp-gpuws-status-item" onClick={this._onClick}>
        <UseSignal signal={this._model.changed}>
          {() => {
            const { text, title } = gpuSummary(this._model.latest);
            return (
              <span className="jp-gpuws-status-text" data-testid="gpuws-status" title={title}>
                {text}
              </span>
            );
          }}
        </UseSignal>
        <UseSignal signal={this._sync.changed}>
          {() => <StatusWord word={syncWord(this._sync)} kind="sync" />}
        </UseSignal>
        <UseSignal signal={this._runtime.changed}>
          {() => <StatusWord word={runtimeWord(this._runtime)} kind="runtime" />}
        </UseSignal>
      </span>
    );
  }
}
