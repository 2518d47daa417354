import Foundation

extension Process {
  /// Runs the process to its end and returns what it wrote to standard error (its standard
  /// output discarded).
  func standardErrorText() throws -> String {
    let errors = Pipe()
    standardError = errors
    standardOutput = FileHandle.nullDevice
    try run()
    let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    waitUntilExit()
    return text
  }
}
