import RampEngine
import RampProtocol
import TOMLKit

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// `[[duck]]` tables: duck rules in force from the start. A table takes `duck-add`'s fields,
/// spelt in kebab-case (`attack-curve`), durations as numbers of seconds or strings such as
/// "200ms"; it is read by the protocol's own parser, so the two cannot disagree.
extension ConfigSchema {
  /// The keys of a `[[duck]]` table, in `duck-add`'s order.
  static let duckKeys = ProtocolSchema.duckRule.map { kebab($0.name) }

  /// `attackCurve` → `attack-curve`.
  static func kebab(_ field: String) -> String {
    field.reduce(into: "") { text, character in
      if character.isUppercase { text += "-" + character.lowercased() } else { text.append(character) }
    }
  }

  /// One `[[duck]]` table as a rule; the error names the key (`duck.voice.depth`).
  static func duck(_ position: Int, _ table: TOMLTable, index: SourceIndex, origin: ConfigOrigin)
    throws(ConfigurationError) -> DuckRule
  {
    let prefix = "duck#\(position)"
    var label = "duck #\(position + 1)"
    if let name = table["name"]?.string, KeyPath.isName(name) { label = "duck.\(name)" }
    func fail(_ key: String?, _ message: String) -> ConfigurationError {
      ConfigurationError(
        source: origin.source, line: key.flatMap { index.keyLines["\(prefix).\($0)"] } ?? origin.line,
        key: key.map { "\(label).\($0)" } ?? label, message: message)
    }
    var object = JSONObject()
    for key in table.keys {
      guard let value = table[key] else { continue }
      guard let field = ProtocolSchema.duckRule.first(where: { kebab($0.name) == key }) else {
        let hint = Suggestion.closest(to: key, among: duckKeys).map { " (did you mean \($0)?)" }
        throw fail(key, "unknown key" + (hint ?? "; the keys of [[duck]] are \(duckKeys.joined(separator: ", "))"))
      }
      let converted = ConfigLayers.convert(value)
      if field.kind == .seconds, case .string(let text) = converted {
        do {
          object[field.name] = .number(try HumanUnits.duration(text, option: key))
        } catch {
          throw fail(key, "expected \(HumanUnits.durationForms), got \"\(text)\"")
        }
        continue
      }
      object[field.name] = converted.json
    }
    do {
      return try DuckRule.parse(object)
    } catch {
      throw fail(kebab(error.field ?? "name"), error.problem ?? error.message)
    }
  }

  /// A rule as the lines of its `[[duck]]` table.
  static func renderDuck(_ rule: DuckRule) -> [(String, String)] {
    let object = Command.duckRule(rule)
    return ProtocolSchema.duckRule.compactMap { field in
      object[field.name].map { (kebab(field.name), $0.serialized()) }
    }
  }
}

extension ConfigValue {
  /// The value as the protocol's parser reads it (a table or a date as an object, which it refuses).
  fileprivate var json: JSONValue {
    switch self {
    case .string(let text): return .string(text)
    case .integer(let value): return .number(Double(value))
    case .float(let value): return .number(value)
    case .boolean(let value): return .bool(value)
    case .array(let values): return .array(values.map(\.json))
    case .other: return .object([:])
    }
  }
}
