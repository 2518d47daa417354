extension StringProtocol {
  /// Without leading and trailing whitespace (the one trim for every parser of typed text).
  public func trimmingWhitespace() -> String { trimming(while: \.isWhitespace) }

  /// Without the leading and trailing characters `trimmed` picks.
  public func trimming(while trimmed: (Character) -> Bool) -> String {
    var slice = Substring(self)
    while let first = slice.first, trimmed(first) { slice.removeFirst() }
    while let last = slice.last, trimmed(last) { slice.removeLast() }
    return String(slice)
  }
}

// Searching and replacing text without the standard library's `firstRange(of:)` and
// `replacing(_:with:)`: those live in _StringProcessing, whose one object file brings its regular
// expression parser with it, 1.3 MB of a static binary that uses no regular expression.
extension StringProtocol {
  /// The first place `needle` occurs, character for character; nil where it does not.
  public func range(ofText needle: some StringProtocol) -> Range<Index>? {
    var start = startIndex
    while true {
      var at = start
      var matched = needle.startIndex
      while matched != needle.endIndex, at != endIndex, self[at] == needle[matched] {
        formIndex(after: &at)
        needle.formIndex(after: &matched)
      }
      if matched == needle.endIndex { return start..<at }
      guard start != endIndex else { return nil }
      formIndex(after: &start)
    }
  }

  /// With every `old` character made `new`.
  public func replacingEvery(_ old: Character, with new: Character) -> String {
    String(map { $0 == old ? new : $0 })
  }
}
