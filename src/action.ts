// What an action of the panel would do now, or why it cannot: one answer for the toolbar
// buttons, the overflow menu and the palette, so a greyed-out action always says why (tooltip).
// Each feature answers for its own actions (src/<feature>/actions.ts).

export interface IAction {
  enabled: boolean;
  /** What the action does when enabled; why it cannot run when not. */
  tooltip: string;
}

export function can(tooltip: string): IAction {
  return { enabled: true, tooltip };
}

export function cannot(tooltip: string): IAction {
  return { enabled: false, tooltip };
}
