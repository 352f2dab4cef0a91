// Text from the store for people: what is not shown as itself is escaped, as Python's
// store/names.py shown() escapes it (tests/sync/test_names.py has the same cases).
import { shown } from '../shown';

describe('text from outside, shown', () => {
  it('escapes a terminal escape sequence and a right-to-left override', () => {
    expect(shown('\x1b[31mtrain\u202egnp.py')).toBe('\\x1b[31mtrain\\u202egnp.py');
  });

  it('escapes every control character (C0, DEL, C1), newlines and tabs by name', () => {
    expect(shown('line\nbreak\tand\x1bescape\x7f')).toBe('line\\nbreak\\tand\\x1bescape\\x7f');
    expect(shown('\x00\r\x9b31m C1')).toBe('\\x00\\r\\x9b31m C1');
  });

  it("escapes the marks and overrides of the text's direction, and line separators", () => {
    expect(shown('\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069')).toBe(
      '\\u061c\\u200e\\u200f\\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069'
    );
    expect(shown('a\u2028b\u2029c')).toBe('a\\u2028b\\u2029c');
  });

  it('escapes a lone surrogate, a byte that was not UTF-8 as that byte', () => {
    expect(shown('f-\udce9.txt')).toBe('f-\\xe9.txt');
    expect(shown('\ud800')).toBe('\\ud800');
  });

  it('leaves the rest as it is: accents, other scripts, emoji', () => {
    const text = 'café ‛41 données 数据 مرحبا 🚀 — "quoted" \\ back';
    expect(shown(text)).toBe(text);
  });
});
