import React from 'react';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';

import { ISample } from './api';
import { formatBytes } from './format';
import { MetricsModel } from './metrics';

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

/** The status-bar item; a click opens the panel. */
export class GpuStatusItem extends ReactWidget {
  constructor(
    private _model: MetricsModel,
    private _onClick: () => void
  ) {
    super();
    this.addClass('jp-gpuws-status');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed}>
        {() => {
          const { text, title } = gpuSummary(this._model.latest);
          return (
            <span
              className="jp-gpuws-status-text"
              data-testid="gpuws-status"
              title={title}
              onClick={this._onClick}
            >
              {text}
            </span>
          );
        }}
      </UseSignal>
    );
  }
}
