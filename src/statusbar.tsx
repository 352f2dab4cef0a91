// The status-bar items: the GPUs (labelled, the busiest one when they differ), the sync and the
// time left in one item, and the live training run in another; built from JupyterLab's own
// status-bar parts so they sit level with their neighbours, and coloured while something needs
// the user, the tooltip saying what.
import React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import { GroupItem, TextItem } from '@jupyterlab/statusbar';

import { gpuIcon } from './icons';
import { MetricsModel } from './metrics/model';
import { gpuSummary } from './metrics/words';
import { RuntimeModel } from './runtime/model';
import { runtimeWord } from './runtime/words';
import { SyncModel } from './sync/model';
import { syncWord } from './sync/words';
import { TrainingModel } from './training/model';
import { trainingWord } from './training/words';
import { IWord } from './vocabulary';
import { Watch } from './watch';

const RANK: { [level: string]: number } = { none: 0, ok: 0, pending: 0, warning: 1, error: 2 };

/** A part of the status-bar item: its words, their explanation and how urgent it is. */
export interface IStatusPart extends IWord {
  name: string;
}

/** How each part of the item is drawn: the GPUs always, the others only when they say something. */
const PARTS: { name: string; testId: string; className?: string; always?: boolean }[] = [
  { name: 'GPU', testId: 'gpuws-status', always: true },
  { name: 'Sync', testId: 'gpuws-status-sync', className: 'jp-gpuws-status-part' },
  { name: 'Runtime', testId: 'gpuws-status-runtime', className: 'jp-gpuws-status-part' }
];

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
      <Watch signals={[this._model.changed, this._sync.changed, this._runtime.changed]}>
        {() => this._item()}
      </Watch>
    );
  }

  private _item(): JSX.Element {
    const words = [
      gpuSummary(this._model.latest),
      syncWord(this._sync),
      runtimeWord(this._runtime)
    ];
    const parts = PARTS.map((part, k) => ({ ...part, ...words[k] }));
    const { level, title } = attention(parts);
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
        {parts.map(part =>
          part.always || part.text ? (
            <TextItem
              key={part.name}
              source={part.text}
              className={part.className}
              data-testid={part.testId}
            />
          ) : null
        )}
      </GroupItem>
    );
  }
}

/** The status bar's training item: "step 1,200/5,000 · ETA 2 h 10 min"; a click opens the dashboard. */
export class TrainingStatusItem extends ReactWidget {
  constructor(
    private _model: TrainingModel,
    private _onClick: () => void
  ) {
    super();
    this.addClass('jp-gpuws-status');
  }

  render(): JSX.Element {
    return (
      <Watch signals={[this._model.changed]}>
        {() => {
          const { text, title, level } = trainingWord(this._model);
          // JupyterLab's own text item: the same font, height and baseline as its neighbours.
          return text ? (
            <TextItem
              source={text}
              title={title}
              className={`jp-gpuws-status-item jp-gpuws-status-training jp-gpuws-status-${level}`}
              data-testid="gpuws-status-training"
              onClick={this._onClick}
            />
          ) : (
            <span />
          );
        }}
      </Watch>
    );
  }
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
