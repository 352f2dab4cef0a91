import React from 'react';

/** One section that fails to draw (an answer of an unexpected shape) says so in its place,
 * instead of blanking the whole panel. */
export class SectionBoundary extends React.Component<
  { name: string; children: React.ReactNode },
  { error: string | null }
> {
  state = { error: null as string | null };

  static getDerivedStateFromError(error: unknown): { error: string } {
    return { error: error instanceof Error ? error.message : String(error) };
  }

  componentDidCatch(error: unknown): void {
    console.error(`GPU Workspace: the ${this.props.name} section failed to draw`, error);
  }

  render(): React.ReactNode {
    if (this.state.error !== null) {
      return (
        <div className="jp-gpuws-message jp-gpuws-error" data-testid="gpuws-section-error">
          The {this.props.name} section could not be shown: {this.state.error}
        </div>
      );
    }
    return this.props.children;
  }
}
