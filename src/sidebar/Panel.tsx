import React from 'react';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';

import { ConnectionState, MetricsModel } from '../metrics';
import { gpuIcon } from '../icons';
import { CheckpointsModel } from '../checkpoints';
import { EnvironmentModel } from '../environment';
import { RuntimeModel } from '../runtime';
import { SyncModel } from '../sync';
import { CheckpointsSection } from './CheckpointsSection';
import { EnvironmentSection } from './EnvironmentSection';
import { GpuSection } from './GpuSection';
import { GitSection, RuntimeSection } from './RuntimeSection';
import { SectionBoundary } from './SectionBoundary';
import { SyncSection } from './SyncSection';
import { SystemSection } from './SystemSection';

const CONNECTION_LABELS: { [state in ConnectionState]: string } = {
  connecting: 'connecting…',
  live: 'live',
  reconnecting: 'reconnecting…',
  polling: 'polling'
};

const CONNECTION_TITLES: { [state in ConnectionState]: string } = {
  connecting: 'Connecting to the server…',
  live: 'Receiving live samples from the server',
  reconnecting: 'The connection dropped; reconnecting…',
  polling: 'Websockets do not get through here; asking the server for samples instead'
};

export interface IPanelOptions {
  sparklineSeconds: number;
}

/** The "GPU Workspace" sidebar: one section per finished capability. */
export class GpuWorkspacePanel extends ReactWidget {
  constructor(
    readonly model: MetricsModel,
    readonly sync: SyncModel,
    readonly checkpoints: CheckpointsModel,
    readonly runtime: RuntimeModel,
    readonly environment: EnvironmentModel,
    public options: IPanelOptions
  ) {
    super();
    this.id = 'jp-gpuws-panel';
    this.addClass('jp-gpuws-panel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU Workspace';
  }

  /** Apply changed settings. */
  configure(options: IPanelOptions): void {
    this.options = options;
    this.update();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.runtime.changed}>
        {() => (this.runtime.released ? <Released /> : this._sections())}
      </UseSignal>
    );
  }

  private _sections(): JSX.Element {
    return (
      <div className="jp-gpuws-body">
        <UseSignal signal={this.model.changed}>{() => <Header model={this.model} />}</UseSignal>
        <SectionBoundary name="Runtime">
          <UseSignal signal={this.runtime.changed}>{() => <RuntimeSection model={this.runtime} />}</UseSignal>
        </SectionBoundary>
        <SectionBoundary name="Sync">
          <UseSignal signal={this.sync.changed}>{() => <SyncSection model={this.sync} />}</UseSignal>
        </SectionBoundary>
        <SectionBoundary name="Checkpoints">
          <UseSignal signal={this.checkpoints.changed}>
            {() => <CheckpointsSection model={this.checkpoints} />}
          </UseSignal>
        </SectionBoundary>
        <SectionBoundary name="Environment">
          <UseSignal signal={this.environment.changed}>
            {() => <EnvironmentSection model={this.environment} />}
          </UseSignal>
        </SectionBoundary>
        <SectionBoundary name="Git">
          <UseSignal signal={this.runtime.changed}>
            {() => (this.runtime.state?.git?.enabled ? <GitSection git={this.runtime.state.git} /> : null)}
          </UseSignal>
        </SectionBoundary>
        <SectionBoundary name="GPU and system">
          <UseSignal signal={this.model.changed}>
            {() => <Monitor model={this.model} options={this.options} />}
          </UseSignal>
        </SectionBoundary>
      </div>
    );
  }
}

function Released(): JSX.Element {
  return (
    <div className="jp-gpuws-body">
      <header className="jp-gpuws-header">
        <h2>GPU Workspace</h2>
      </header>
      <div className="jp-gpuws-message" data-testid="gpuws-released">
        This runtime was released: everything was persisted to the store and the server stopped.
        Close this tab; start a runtime again to pick up where you left off.
      </div>
    </div>
  );
}

function Header(props: { model: MetricsModel }): JSX.Element {
  const { connection } = props.model;
  return (
    <header className="jp-gpuws-header">
      <h2>GPU Workspace</h2>
      <span
        className={`jp-gpuws-connection jp-gpuws-connection-${connection}`}
        data-testid="gpuws-connection"
        title={CONNECTION_TITLES[connection]}
      >
        {CONNECTION_LABELS[connection]}
      </span>
    </header>
  );
}

function Monitor(props: { model: MetricsModel; options: IPanelOptions }): JSX.Element {
  const { model } = props;
  const sample = model.latest;
  return (
    <>
      {model.error && <div className="jp-gpuws-message jp-gpuws-error">{model.error}</div>}
      {sample ? (
        <>
          <GpuSection
            sample={sample}
            history={model.history}
            sparklineSeconds={props.options.sparklineSeconds}
          />
          <SystemSection system={sample.system} />
        </>
      ) : (
        !model.error && <div className="jp-gpuws-message">Waiting for the first sample…</div>
      )}
    </>
  );
}
