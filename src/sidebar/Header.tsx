// The panel's sticky header: the title with Persist now and the overflow menu (⋯) as icon
// buttons, and below, what matters at a glance wherever the panel is scrolled: the time left,
// the sync, the live connection.
import React from 'react';
import { ellipsesIcon, ToolbarButtonComponent } from '@jupyterlab/ui-components';

import { persistIcon } from '../icons';
import { serverReach } from '../reach';
import { ConnectionState, MetricsModel } from '../metrics/model';
import { RuntimeModel } from '../runtime/model';
import { runtimeWord } from '../runtime/words';
import { persist, persistAction } from '../sync/actions';
import { SyncModel } from '../sync/model';
import { syncWord } from '../sync/words';
import { WORDS } from '../vocabulary';
import { ActionButton } from './Section';

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

/** The one line the panel shows while the server does not answer. */
export function unansweredText(since: number): string {
  const at = new Date(since).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return (
    `The Jupyter server is not answering (since ${at}): the figures below are its last, ` +
    'greyed, and come back by themselves when it answers. If it was stopped, start it again.'
  );
}

export function PanelHeader(props: {
  metrics: MetricsModel;
  sync: SyncModel;
  runtime: RuntimeModel;
  /** Opens the overflow menu below the given button. */
  onMore: (anchor: HTMLElement) => void;
}): JSX.Element {
  const { metrics, sync, runtime } = props;
  const time = runtimeWord(runtime);
  const state = sync.status;
  const word = syncWord(sync);
  const connection = metrics.connection;
  return (
    <header className="jp-gpuws-header">
      <div className="jp-gpuws-header-bar">
        <h2 className="jp-gpuws-header-title">GPU Workspace</h2>
        <div className="jp-gpuws-header-toolbar">
          <ActionButton
            action={persistAction(sync)}
            icon={persistIcon}
            onClick={() => void persist(sync)}
            testId="gpuws-persist"
          />
          <ToolbarButtonComponent
            icon={ellipsesIcon}
            tooltip="More actions: Persist and release, Snapshot now, Take over, Settings"
            aria-haspopup="menu"
            dataset={{ testid: 'gpuws-more' }}
            className="jp-gpuws-action"
            onClick={event => props.onMore((event?.currentTarget as HTMLElement) ?? document.body)}
          />
        </div>
      </div>
      {serverReach.since !== null && (
        <div
          className="jp-gpuws-message jp-gpuws-error jp-gpuws-unanswered"
          data-testid="gpuws-unanswered"
          role="alert"
        >
          {unansweredText(serverReach.since)}
        </div>
      )}
      <div className="jp-gpuws-header-status">
        <span
          className={`jp-gpuws-chip jp-gpuws-chip-time jp-gpuws-tone-${time.text ? time.level : 'none'}${time.text ? '' : ' jp-gpuws-subtle'}`}
          data-testid="gpuws-header-time"
          title={
            time.text
              ? time.title
              : 'No deadline is known: no runtime limit, deadline, idle shutdown or preemption notice'
          }
        >
          {time.text || WORDS.runtime.no_end}
        </span>
        <span
          className={`jp-gpuws-chip jp-gpuws-chip-sync jp-gpuws-tone-${word.level}`}
          data-testid="gpuws-header-sync"
          title={word.title || (state ? '' : 'Waiting for the sync to answer…')}
        >
          {word.text || '…'}
        </span>
        <span
          className={`jp-gpuws-connection jp-gpuws-connection-${connection}`}
          data-testid="gpuws-connection"
          data-state={connection}
          title={CONNECTION_TITLES[connection]}
          aria-label={CONNECTION_LABELS[connection]}
          role="status"
        >
          {/* Live is the normal state: a green dot says it; the others are spelt out. */}
          {connection === 'live' ? null : CONNECTION_LABELS[connection]}
        </span>
      </div>
    </header>
  );
}
