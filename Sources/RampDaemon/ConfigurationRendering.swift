import RampAudio
import RampEngine

extension DaemonConfiguration {
  /// The effective configuration as `(key, TOML value)` pairs, in file order: `("output.rate", "48000")`,
  /// `("socket.path", "\"\"")` for a computed default, `("mixer.master.card", "\"default\"")`.
  public func summary() -> [(key: String, value: String)] {
    var pairs: [(key: String, value: String)] = []
    for section in ConfigSchema.sections {
      if section == "mixer" {
        for mixer in mixers {
          for (name, value) in ConfigSchema.renderMixer(mixer) { pairs.append(("mixer.\(mixer.name).\(name)", value)) }
        }
        continue
      }
      if section == "duck" {
        for rule in ducks {
          for (name, value) in ConfigSchema.renderDuck(rule) { pairs.append(("duck.\(rule.name).\(name)", value)) }
        }
        continue
      }
      for key in ConfigSchema.keys(in: section) { pairs.append((key.path, key.render(self))) }
    }
    return pairs
  }

  /// The effective configuration as a TOML file that `parse` reads back to an equal configuration
  /// (for `rampd --check-config --print`). Paths left to their computed default are written `""`.
  public var rendered: String {
    var lines = ["# rampd: effective configuration"]
    for section in ConfigSchema.sections {
      if section == "mixer" {
        for mixer in mixers {
          lines += ["", "[[mixer]]"]
          lines += ConfigSchema.renderMixer(mixer).map { "\($0.0) = \($0.1)" }
        }
        continue
      }
      if section == "duck" {
        for rule in ducks {
          lines += ["", "[[duck]]"]
          lines += ConfigSchema.renderDuck(rule).map { "\($0.0) = \($0.1)" }
        }
        continue
      }
      lines += ["", "[\(section)]"]
      for key in ConfigSchema.keys(in: section) {
        let value = key.render(self)
        lines.append("\(key.name) = \(value)" + (key.computedDefault && value == "\"\"" ? "  # default" : ""))
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }
}
