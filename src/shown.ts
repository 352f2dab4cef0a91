// Text from outside for people: a job's name, command, folder, reason, changed paths and log
// lines come from the store, which anyone who writes it can fill. Control characters (C0, DEL,
// C1), line and paragraph separators, lone surrogates, and the marks and overrides that change
// the direction text is shown in (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) are
// written as escapes, as Python's store/names.py shown() writes them: a right-to-left override
// cannot show "gnp.py" as "yp.png", nor a command as another.

const UNSHOWABLE =
  // eslint-disable-next-line no-control-regex -- finding control characters is its purpose
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

const NAMED: { [char: string]: string } = { '\n': '\\n', '\t': '\\t', '\r': '\\r' };

/** `text` with what is not shown as itself escaped: `\x1b`, `\u202e`, `\n`; the rest as it is. */
export function shown(text: string): string {
  return text.replace(UNSHOWABLE, char => {
    if (char in NAMED) {
      return NAMED[char];
    }
    const code = char.charCodeAt(0);
    // A byte that was not UTF-8, as Python's surrogate escape carries it: the byte.
    if (code >= 0xdc80 && code <= 0xdcff) {
      return `\\x${(code - 0xdc00).toString(16)}`;
    }
    return code < 0x100
      ? `\\x${code.toString(16).padStart(2, '0')}`
      : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
