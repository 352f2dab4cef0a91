import React from 'react';
import { TextItem } from '@jupyterlab/statusbar';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';

import { TrainingModel, trainingWord } from './training';

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
      <UseSignal signal={this._model.changed}>
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
      </UseSignal>
    );
  }
}
