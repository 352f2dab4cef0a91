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
import { attention } from './attention';
import { Watch } from './watch';

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
