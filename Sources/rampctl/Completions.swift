import ArgumentParser
import FoundationEssentials
import RampCLI
import RampEngine
import RampProtocol

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Shell completion candidates. Key paths and streams come from the running rampd (found the
/// way the command would find it, `--socket` included); with no daemon there are none.
enum Completions {
  static let curves = CompletionKind.list(TimingFunction.names)
  static let spaces = CompletionKind.list(["amplitude", "db", "power"])
  static let keyPaths = CompletionKind.custom { words, _, _ in
    ask(words, Request(.list(prefix: nil))) { result in
      (result["properties"]?.arrayValue ?? []).compactMap { $0["key"]?.stringValue }
    }
  }
  static let streams = CompletionKind.custom { words, _, _ in
    ask(words, Request(.status)) { result in
      (result["streams"]?.arrayValue ?? []).compactMap { $0["stream"]?.stringValue }
    }
  }

  /// One request to rampd, its result turned into words; nothing when anything goes wrong.
  private static func ask(_ words: [String], _ request: Request, _ pick: (JSONValue) -> [String]) -> [String] {
    let option: String? = words.firstIndex(of: "--socket").flatMap {
      words.indices.contains($0 + 1) ? words[$0 + 1] : nil
    }
    let path = SocketLocation.clientPath(
      option: option, environment: ProcessInfo.processInfo.environment, isRoot: geteuid() == 0)
    guard let daemon = try? DaemonConnection(path: path, greetingTimeout: 1),
      let reply = try? daemon.call(request, timeout: 1)
    else { return [] }
    return pick(reply.result)
  }
}
