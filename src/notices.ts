// Episodes the server reports (a GPU alert, a training anomaly) told once each per browser tab.

/** The episodes already told, remembered in the tab's session storage so a reload does not
 * tell them again; only those still open are kept, so the memory stays small. */
export class EpisodeMemory {
  constructor(private _key: string) {
    try {
      this._told = new Set(JSON.parse(sessionStorage.getItem(_key) ?? '[]'));
    } catch {
      this._told = new Set();
    }
  }

  /** Of the episodes open now, those not told yet: from now on they count as told. */
  untold<T extends { id: string }>(open: T[]): T[] {
    const fresh = open.filter(episode => !this._told.has(episode.id));
    if (fresh.length) {
      const ids = new Set(open.map(episode => episode.id));
      this._told = new Set([...this._told, ...fresh.map(episode => episode.id)]);
      this._told = new Set([...this._told].filter(id => ids.has(id)));
      sessionStorage.setItem(this._key, JSON.stringify([...this._told]));
    }
    return fresh;
  }

  private _told: Set<string>;
}
