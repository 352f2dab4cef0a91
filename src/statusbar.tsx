// The status-bar item: the GPUs (labelled, the busiest one when they differ), the sync and the
// time left, built from JupyterLab's own status-bar parts so it sits level with its neighbours,
// and coloured as a whole while something needs the user, its tooltip saying what.
import React from 'react';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { GroupItem, TextItem } from '@jupyterlab/statusbar';

import { IGpu, ISample } from './api';
import { percent } from './format';
import { gpuIcon } from './icons';
import { MetricsModel } from './metrics';
import { RuntimeModel, runtimeWord } from './runtime';
import { Level, SyncModel, syncWord } from './sync';
import { percentText, usage } from './vocabulary';

export { syncWord };

/** GPUs whose utilisation or memory differ by this many points read as different. */
const DIFFERENT = 20;

function memoryShare(gpu: IGpu): number {
  return percent(gpu.memory_used, gpu.memory_total) ?? 0;
}

/** How hard a GPU works: its utilisation or its memory use, whichever is higher. */
function load(gpu: IGpu): number {
  return Math.max(gpu.utilization ?? 0, memoryShare(gpu));
}

/** What the status bar says about the GPUs: "GPU 47 % · 39.9/80 GiB"; with several that
 * differ, the busiest: "GPU 0 97 % · 38.9/40 GiB (busiest of 2)". */
export function gpuSummary(sample: ISample | null): { text: string; title: string; level: Level } {
  if (!sample) {
    return { text: 'GPU …', title: 'Waiting for the first sample', level: 'none' };
  }
  const gpus = sample.gpus;
  const alerts = sample.alerts.map(alert => alert.message);
  const level: Level = gpus.some(g => memoryShare(g) >= 95)
    ? 'error'
    : alerts.length
      ? 'warning'
      : 'none';
  if (gpus.length === 0) {
    return {
      text: 'No GPU',
      title: [sample.gpu_error ?? 'No GPU found', ...alerts].join('\n'),
      level
    };
  }
  const lines = gpus.map(
    g =>
      `GPU ${g.index} ${g.name}: ${percentText(g.utilization)} · ${usage(g.memory_used, g.memory_total)}`
  );
  const title = [...lines, ...alerts].join('\n');
  if (gpus.length === 1) {
    const g = gpus[0];
    return {
      text: `GPU ${percentText(g.utilization)} · ${usage(g.memory_used, g.memory_total)}`,
      title,
      level
    };
  }
  const utils = gpus.map(g => g.utilization ?? 0);
  const shares = gpus.map(memoryShare);
  const spread = (values: number[]) => Math.max(...values) - Math.min(...values);
  if (spread(utils) < DIFFERENT && spread(shares) < DIFFERENT) {
    const used = gpus.reduce((sum, g) => sum + (g.memory_used ?? 0), 0);
    const total = gpus.reduce((sum, g) => sum + (g.memory_total ?? 0), 0);
    const mean = utils.reduce((a, b) => a + b, 0) / utils.length;
    return {
      text: `${gpus.length} GPUs ${percentText(mean)} · ${usage(used, total)}`,
      title,
      level
    };
  }
  const busiest = gpus.reduce((a, b) => (load(b) > load(a) ? b : a));
  return {
    text: `GPU ${busiest.index} ${percentText(busiest.utilization)} · ${usage(busiest.memory_used, busiest.memory_total)} (busiest of ${gpus.length})`,
    title,
    level
  };
}

const RANK: { [level: string]: number } = { none: 0, ok: 0, pending: 0, warning: 1, error: 2 };

/** The status-bar item; a click (or Enter) opens the panel. */
export class GpuStatusItem extends ReactWidget {
  constructor(
    private _model: MetricsModel,
    private _sync: SyncModel,
    private _runtime: RuntimeModel,
    private _onClick: () => void
  ) {
    super();
    this.addClass('jp-gpuws-status');
    this.addClass('jp-mod-highlighted');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed}>
        {() => (
          <UseSignal signal={this._sync.changed}>
            {() => <UseSignal signal={this._runtime.changed}>{() => this._item()}</UseSignal>}
          </UseSignal>
        )}
      </UseSignal>
    );
  }

  private _item(): JSX.Element {
    const gpu = gpuSummary(this._model.latest);
    const sync = syncWord(this._sync);
    const runtime = runtimeWord(this._runtime);
    const { level, title } = attention([
      { name: 'GPU', ...gpu },
      { name: 'Sync', ...sync },
      { name: 'Runtime', ...runtime }
    ]);
    const open = (event: React.KeyboardEvent) => {
      if (event.key === 'Enter' || event.key === ' ') {
        this._onClick();
      }
    };
    // One tooltip for the whole item (its parts have none of their own, so it shows wherever
    // the pointer is): why it is coloured, then each part in full.
    return (
      <GroupItem
        spacing={4}
        className={`jp-gpuws-status-item jp-gpuws-status-${level}`}
        onClick={this._onClick}
        onKeyDown={open}
        role="button"
        tabIndex={0}
        title={title}
        aria-label="GPU Workspace: open the panel"
        data-testid="gpuws-status-item"
      >
        <gpuIcon.react tag="span" className="jp-gpuws-status-icon" />
        <TextItem source={gpu.text} data-testid="gpuws-status" />
        {sync.text ? (
          <TextItem
            source={sync.text}
            className="jp-gpuws-status-part"
            data-testid="gpuws-status-sync"
          />
        ) : null}
        {runtime.text ? (
          <TextItem
            source={runtime.text}
            className="jp-gpuws-status-part"
            data-testid="gpuws-status-runtime"
          />
        ) : null}
      </GroupItem>
    );
  }
}

/** A part of the status-bar item: its words, their explanation and how urgent it is. */
export interface IStatusPart {
  name: string;
  text: string;
  title: string;
  level: Level;
}

/** The status-bar item's colour and tooltip. It is coloured only while a part needs the user
 * (warning: orange, error: red): an alert, a sync fault, a store on this machine's own disk,
 * another runtime writing, 10 minutes or less left. The tooltip says first why it is coloured,
 * every reason, then what each part says in full. */
export function attention(parts: IStatusPart[]): {
  level: 'calm' | 'warning' | 'error';
  title: string;
} {
  const urgent = parts.filter(p => RANK[p.level] > 0);
  const level = urgent.some(p => p.level === 'error')
    ? 'error'
    : urgent.length
      ? 'warning'
      : 'calm';
  const details = parts.filter(p => p.title).map(p => `${p.name}: ${p.title}`);
  if (level === 'calm') {
    return { level, title: details.join('\n') };
  }
  const colour = level === 'error' ? 'Red' : 'Orange';
  const reasons = urgent.map(p => `• ${p.name}: ${p.title || p.text}`);
  const others = parts
    .filter(p => RANK[p.level] === 0 && p.title)
    .map(p => `${p.name}: ${p.title}`);
  return {
    level,
    title: [`${colour} because:`, ...reasons, ...(others.length ? ['', ...others] : [])].join('\n')
  };
}
