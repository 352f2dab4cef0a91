// A React component that draws its children again whenever one of several signals emits: what
// the panel, the status bar and the dashboard need instead of one UseSignal inside another.
import React from 'react';
import { ISignal } from '@lumino/signaling';

export class Watch extends React.Component<{
  signals: ISignal<unknown, unknown>[];
  children: () => React.ReactNode;
}> {
  componentDidMount(): void {
    this._connect(this.props.signals);
  }

  componentDidUpdate(previous: { signals: ISignal<unknown, unknown>[] }): void {
    if (previous.signals !== this.props.signals) {
      this._disconnect(previous.signals);
      this._connect(this.props.signals);
    }
  }

  componentWillUnmount(): void {
    this._disconnect(this.props.signals);
  }

  render(): React.ReactNode {
    return this.props.children();
  }

  private _connect(signals: ISignal<unknown, unknown>[]): void {
    signals.forEach(signal => signal.connect(this._redraw, this));
  }

  private _disconnect(signals: ISignal<unknown, unknown>[]): void {
    signals.forEach(signal => signal.disconnect(this._redraw, this));
  }

  private _redraw(): void {
    this.forceUpdate();
  }
}
