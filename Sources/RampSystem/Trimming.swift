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
