import React from 'react';
import { ReactWidget } from '@jupyterlab/ui-components';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';
import { Menu } from '@lumino/widgets';

import { gpuIcon } from '../icons';
import { serverReach } from '../reach';
import { Watch } from '../watch';
import { PanelHeader } from './Header';
import { IPanelModels, IPanelOptions, defaultSections } from './sections';
import { CollapsibleSection, IPanelSection, rankOf, SectionMemory } from './Section';

export { IPanelModels, IPanelOptions };

/** The "GPU Workspace" sidebar: a sticky header (time left, sync, Persist now, ⋯), then one
 * foldable section per capability, in rank order. */
export class GpuWorkspacePanel extends ReactWidget {
  constructor(
    readonly models: IPanelModels,
    public options: IPanelOptions,
    private _memory: SectionMemory,
    private _menu: Menu | null
  ) {
    super();
    this.id = 'jp-gpuws-panel';
    this.addClass('jp-gpuws-panel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU Workspace';
    this._sections = defaultSections(models, () => this.options);
  }

  /** Apply changed settings. */
  configure(options: IPanelOptions): void {
    this.options = options;
    this._sectionsChanged.emit();
  }

  /** Add a section (for a capability that comes later, such as training runs); disposing the
   * result removes it. */
  addSection(section: IPanelSection): IDisposable {
    this._sections = [...this._sections.filter(s => s.id !== section.id), section];
    this._sectionsChanged.emit();
    let disposed = false;
    return {
      get isDisposed() {
        return disposed;
      },
      dispose: () => {
        disposed = true;
        this._sections = this._sections.filter(s => s !== section);
        this._sectionsChanged.emit();
      }
    };
  }

  render(): JSX.Element {
    const { metrics, sync, runtime } = this.models;
    return (
      <Watch signals={[runtime.changed]}>
        {() =>
          runtime.released ? (
            <Released />
          ) : (
            <Watch signals={[serverReach.changed]}>
              {() => (
                <div
                  className={`jp-gpuws-body${serverReach.since === null ? '' : ' jp-gpuws-mod-unanswered'}`}
                >
                  <Watch signals={[metrics.changed, sync.changed, runtime.changed]}>
                    {() => (
                      <PanelHeader
                        metrics={metrics}
                        sync={sync}
                        runtime={runtime}
                        onMore={anchor => this._openMenu(anchor)}
                      />
                    )}
                  </Watch>
                  <Watch signals={this._signals()}>{() => this._drawSections()}</Watch>
                </div>
              )}
            </Watch>
          )
        }
      </Watch>
    );
  }

  private _signals(): ISignal<unknown, unknown>[] {
    const all = new Set<ISignal<unknown, unknown>>([this._sectionsChanged, this._memory.changed]);
    this._sections.forEach(section => section.changed.forEach(signal => all.add(signal)));
    if (this._signalCache.length !== all.size || this._signalCache.some(s => !all.has(s))) {
      this._signalCache = [...all];
    }
    return this._signalCache;
  }

  private _drawSections(): JSX.Element {
    const shown = this._sections
      .filter(section => !section.visible || section.visible())
      .map(section => ({ section, rank: rankOf(section) }))
      .sort((a, b) => a.rank - b.rank);
    return (
      <>
        {shown.map(({ section }) => (
          <CollapsibleSection key={section.id} section={section} memory={this._memory} />
        ))}
      </>
    );
  }

  private _openMenu(anchor: HTMLElement): void {
    if (!this._menu) {
      return;
    }
    const box = anchor.getBoundingClientRect();
    this._menu.open(box.right, box.bottom, { horizontalAlignment: 'right' });
  }

  private _sections: IPanelSection[];
  private _sectionsChanged = new Signal<this, void>(this);
  private _signalCache: ISignal<unknown, unknown>[] = [];
}

function Released(): JSX.Element {
  return (
    <div className="jp-gpuws-body">
      <header className="jp-gpuws-header">
        <div className="jp-gpuws-header-bar">
          <h2 className="jp-gpuws-header-title">GPU Workspace</h2>
        </div>
      </header>
      <div className="jp-gpuws-message" data-testid="gpuws-released">
        This runtime was released: everything was persisted to the store and the server stopped.
        Close this tab; start a runtime again to pick up where you left off.
      </div>
    </div>
  );
}
