import RampProtocol

/// rampd's refusals retold with what the user typed: rampd saw only the number a value became,
/// so `+3dB` came back as `1.4125375446227544`, and `50` (meant as a percentage) as just too much.
public enum RefusalText {
  /// `error` with the value as typed in place of the number rampd quotes, and a hint at the
  /// likely mistake; any other refusal as it is. `typed` maps wire fields to the text typed.
  ///
  /// Composed from the refusal's data (`value`, `detail`, `bound`), never from its message: a
  /// refusal without a `detail` keeps the message rampd wrote.
  public static func explained(_ error: ProtocolError, typed: [String: String]) -> ProtocolError {
    guard error.code == .outOfRange, let field = error.field, let text = typed[field], let number = error.value
    else { return error }
    var explained = error
    if let detail = error.detail {
      // `+3dB (1.412538)`; a plain number as typed (`50`, not `50.0`).
      let echo = Double(text) == number ? text : text + " (\(HumanUnits.format(gain: number)))"
      explained.message = echo + " " + detail
    }
    // `50` for a gain is most likely 50%: a whole number people type for a volume.
    if error.bound == .gainMaximum, let typedNumber = Double(text), typedNumber == typedNumber.rounded(),
      (5...100).contains(typedNumber)
    {
      explained.message += "; did you mean \(text)%?"
    }
    return explained
  }
}
