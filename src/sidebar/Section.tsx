// The panel's sections as JupyterLab's Running panel draws them: a title bar with a caret that
// folds the section (remembered in the workspace's state) and its actions as icon buttons.
// A section is a descriptor, so a new one (a Training section, say) slots in by rank.
import React from 'react';
import { IStateDB } from '@jupyterlab/statedb';
import { caretDownIcon, LabIcon, ToolbarButtonComponent } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { ReadonlyJSONValue } from '@lumino/coreutils';

import { IAction } from '../action';
import { SectionBoundary } from './SectionBoundary';

export interface IPanelSection {
  /** A stable name: the key of its remembered folding, and its data-section attribute. */
  id: string;
  /** The title bar's words (also the section's accessible name). */
  title: string;
  /** Lower comes first; a function when the place depends on the state (the GPUs come right
   * below the header when there are GPUs, near the end when there are none). */
  rank: number | (() => number);
  /** The signals after which the section draws again. */
  changed: ISignal<unknown, unknown>[];
  /** Whether the section shows now (Git only with Git versioning on); shown when absent. */
  visible?: () => boolean;
  /** A few words beside the folded title, so a folded section still says how it is. */
  summary?: () => string;
  /** The section's actions, drawn as icon buttons at the right of its title bar. */
  toolbar?: () => JSX.Element | null;
  /** The section's content. */
  render: () => JSX.Element | null;
}

export function rankOf(section: IPanelSection): number {
  return typeof section.rank === 'function' ? section.rank() : section.rank;
}

const STATE_KEY = 'jupyter_gpu_ws:panel';

/** Which sections the user folded, kept in JupyterLab's state database (so in the workspace,
 * across reloads) when there is one. */
export class SectionMemory {
  constructor(private _state: IStateDB | null) {
    if (_state) {
      void _state
        .fetch(STATE_KEY)
        .then(value => {
          const folded = (value as { folded?: unknown } | undefined)?.folded;
          if (Array.isArray(folded)) {
            this._folded = new Set(folded.filter((id): id is string => typeof id === 'string'));
            this._changed.emit();
          }
        })
        .catch(() => undefined);
    }
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  isFolded(id: string): boolean {
    return this._folded.has(id);
  }

  toggle(id: string): void {
    if (!this._folded.delete(id)) {
      this._folded.add(id);
    }
    this._changed.emit();
    const value: ReadonlyJSONValue = { folded: [...this._folded].sort() };
    void this._state?.save(STATE_KEY, value).catch(() => undefined);
  }

  private _folded = new Set<string>();
  private _changed = new Signal<this, void>(this);
}

/** One section: its title bar (caret, title, summary when folded, icon buttons) and content. */
export function CollapsibleSection(props: {
  section: IPanelSection;
  memory: SectionMemory;
}): JSX.Element {
  const { section, memory } = props;
  const folded = memory.isFolded(section.id);
  const bodyId = `jp-gpuws-section-${section.id}`;
  const summary = folded && section.summary ? section.summary() : '';
  return (
    <section
      className={`jp-gpuws-section${folded ? ' jp-mod-folded' : ''}`}
      aria-label={section.title}
      data-section={section.id}
    >
      <div className="jp-gpuws-section-header">
        <button
          className="jp-gpuws-section-toggle"
          aria-expanded={!folded}
          aria-controls={bodyId}
          title={`${folded ? 'Unfold' : 'Fold'} ${section.title}`}
          data-testid={`gpuws-fold-${section.id}`}
          onClick={() => memory.toggle(section.id)}
        >
          <caretDownIcon.react tag="span" className="jp-gpuws-caret" />
          <span className="jp-gpuws-section-title">{section.title}</span>
          {summary && (
            <span
              className="jp-gpuws-section-summary"
              title={summary}
              data-testid="gpuws-section-summary"
            >
              {summary}
            </span>
          )}
        </button>
        {section.toolbar && (
          <div className="jp-gpuws-section-toolbar">
            <SectionBoundary name={`${section.title} toolbar`}>{section.toolbar()}</SectionBoundary>
          </div>
        )}
      </div>
      {!folded && (
        <div className="jp-gpuws-section-body" id={bodyId}>
          <SectionBoundary name={section.title}>{section.render()}</SectionBoundary>
        </div>
      )}
    </section>
  );
}

/** An action as a toolbar icon button whose tooltip says what it does, or why it cannot. */
export function ActionButton(props: {
  action: IAction;
  icon: LabIcon;
  onClick: () => void;
  testId: string;
  label?: string;
}): JSX.Element {
  const { action } = props;
  return (
    <ToolbarButtonComponent
      icon={props.icon}
      tooltip={action.tooltip}
      label={props.label}
      enabled={action.enabled}
      onClick={props.onClick}
      dataset={{ testid: props.testId }}
      className="jp-gpuws-action"
    />
  );
}
