import CSndFile
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// How samples are stored in a file that ``SoundFileWriter`` writes.
///
/// Lossy containers (Ogg Vorbis, Ogg Opus, MP3) have their own codec and ignore the encoding.
/// FLAC stores integers of at most 24 bits: only ``pcm16`` and ``pcm24`` are allowed there.
public enum SampleEncoding: String, CaseIterable, Sendable {
  /// 32-bit IEEE float, bit-exact for the samples written.
  case float
  /// 16-bit signed integers.
  case pcm16
  /// 24-bit signed integers.
  case pcm24
  /// 32-bit signed integers.
  case pcm32

  /// The encoding of a libsndfile subtype, nil for any other (8-bit, double, compressed, …).
  init?(sndfileSubtype subtype: Int32) {
    switch subtype & Int32(SF_FORMAT_SUBMASK) {
    case Int32(SF_FORMAT_FLOAT): self = .float
    case Int32(SF_FORMAT_PCM_16): self = .pcm16
    case Int32(SF_FORMAT_PCM_24): self = .pcm24
    case Int32(SF_FORMAT_PCM_32): self = .pcm32
    default: return nil
    }
  }

  var sndfileSubtype: Int32 {
    switch self {
    case .float: return Int32(SF_FORMAT_FLOAT)
    case .pcm16: return Int32(SF_FORMAT_PCM_16)
    case .pcm24: return Int32(SF_FORMAT_PCM_24)
    case .pcm32: return Int32(SF_FORMAT_PCM_32)
    }
  }
}

/// libsndfile keeps the reason for a failed `sf_open` in a process-wide variable
/// (`sf_strerror(NULL)`), so a failed open and the read of its reason must not interleave with
/// another thread's open.
private let sndfileOpenLock = Mutex(())

/// Reads or writes an open descriptor with libsndfile (which leaves it open); on failure returns
/// libsndfile's reason instead.
private func openSndfile(descriptor: CInt, mode: Int32 = Int32(SFM_READ), info: inout SF_INFO) -> Result<
  OpaquePointer, Reason
> {
  sndfileOpenLock.withLock { _ in
    if let file = sf_open_fd(descriptor, mode, &info, 0) {
      return .success(file)
    }
    return .failure(Reason(text: String(cString: sf_strerror(nil))))
  }
}

private struct Reason: Error {
  var text: String
}

/// The name libsndfile gives a major format (`SF_FORMAT_WAV` → "WAV (Microsoft)").
private func majorFormatName(_ format: Int32) -> String {
  var info = SF_FORMAT_INFO(format: format & Int32(SF_FORMAT_TYPEMASK), name: nil, extension: nil)
  let status = sf_command(nil, Int32(SFC_GET_FORMAT_INFO), &info, Int32(MemoryLayout<SF_FORMAT_INFO>.size))
  guard status == 0, let name = info.name else {
    return "format 0x" + String(UInt32(bitPattern: format & Int32(SF_FORMAT_TYPEMASK)), radix: 16)
  }
  return String(cString: name)
}

/// Reads an audio file through libsndfile as interleaved 32-bit float frames in [-1, 1].
///
/// Not `Sendable`: one thread owns a reader (typically a decoder thread). The file is closed when
/// the reader is released.
///
/// Damaged files: a truncated file (a header that claims more data than the file holds) plays
/// what is there — libsndfile reports the frames actually present, or ``read(into:frames:)``
/// returns fewer frames and then 0. A read error that libsndfile does report throws.
public final class SoundFileReader {
  /// The path the reader was opened with.
  public let path: String
  /// The file actually opened, symbolic links resolved, as the kernel names the descriptor; a
  /// policy on where files may be checks this, which no rename after the open can change.
  public let openedPath: String
  private let descriptor: CInt
  /// Frames per second.
  public let sampleRate: Int
  /// Interleaved channels per frame.
  public let channels: Int
  /// Frames in the file, as the container declares them. For some formats and streams the length
  /// is unknown and libsndfile reports a huge value (`Int64.max`); it is an estimate, not a
  /// promise: read until ``read(into:frames:)`` returns 0.
  public let frames: Int64
  /// libsndfile's name of the container ("WAV (Microsoft)", "FLAC (Free Lossless Audio Codec)", …).
  public let formatName: String
  /// Whether ``seek(toFrame:)`` is possible.
  public let seekable: Bool
  /// The raw libsndfile format (major | subtype).
  public let sndfileFormat: Int32
  /// How the file stores its samples, when that is one of the ``SampleEncoding`` cases; nil for
  /// anything else (8-bit, double, ADPCM, lossy codecs, …).
  public var encoding: SampleEncoding? { SampleEncoding(sndfileSubtype: sndfileFormat) }

  /// Integer samples (PCM, FLAC, µ-law, A-law): read as floats, they lie in [−1, 1], so they
  /// need no check for NaN or infinity; float files and lossy decoders may hold anything.
  public var samplesAreBounded: Bool {
    let integers =
      [SF_FORMAT_PCM_S8, SF_FORMAT_PCM_U8, SF_FORMAT_PCM_16, SF_FORMAT_PCM_24, SF_FORMAT_PCM_32]
      + [SF_FORMAT_ULAW, SF_FORMAT_ALAW]
    return integers.contains { Int32($0) == sndfileFormat & Int32(SF_FORMAT_SUBMASK) }
  }

  private var file: OpaquePointer
  /// 16-bit files are read as integers and converted here: libsndfile's own conversion goes
  /// through a small internal buffer, one system call per 8 KiB.
  private let readsShorts: Bool
  private let shorts = ScratchBuffer<Int16>()

  /// Opens `path` for reading.
  ///
  /// - Throws: ``AudioError/Code/unreadableFile`` naming the file and giving the reason: missing,
  ///   a directory or other non-regular file, not audio, corrupt header, unsupported format.
  public init(path: String) throws(AudioError) {
    self.path = path
    // The kind is judged on the open descriptor, not the name, so nothing can be swapped in between;
    // O_NONBLOCK keeps a FIFO from blocking the open until a writer comes.
    let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
    guard descriptor >= 0 else {
      throw AudioError(.unreadableFile, "cannot read '\(path)': \(String(cString: strerror(errno))).")
    }
    var status = stat()
    guard fstat(descriptor, &status) == 0 else {
      let reason = String(cString: strerror(errno))
      close(descriptor)
      throw AudioError(.unreadableFile, "cannot read '\(path)': \(reason).")
    }
    let kind = status.st_mode & S_IFMT
    guard kind == S_IFREG else {
      close(descriptor)
      if kind == S_IFDIR {
        throw AudioError(.unreadableFile, "cannot read '\(path)': it is a directory, not an audio file.")
      }
      throw AudioError(.unreadableFile, "cannot read '\(path)': it is not a regular file.")
    }
    _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
    openedPath = Self.pathOf(descriptor) ?? path
    var info = SF_INFO()
    let file: OpaquePointer
    switch openSndfile(descriptor: descriptor, info: &info) {
    case .success(let opened): file = opened
    case .failure(let reason):
      close(descriptor)
      throw AudioError(.unreadableFile, "cannot read '\(path)': \(reason.text)")
    }
    self.descriptor = descriptor
    guard info.channels > 0, info.samplerate > 0 else {
      sf_close(file)
      close(descriptor)
      throw AudioError(
        .unreadableFile,
        "cannot read '\(path)': header declares \(info.channels) channels at \(info.samplerate) Hz.")
    }
    self.file = file
    self.sampleRate = Int(info.samplerate)
    self.channels = Int(info.channels)
    self.frames = info.frames
    self.seekable = info.seekable != 0
    self.sndfileFormat = info.format
    self.formatName = majorFormatName(info.format)
    self.readsShorts = info.format & Int32(SF_FORMAT_SUBMASK) == Int32(SF_FORMAT_PCM_16)
  }

  deinit {
    sf_close(file)
    close(descriptor)
  }

  /// The identity of the file this reader has open (a measurement of it is cached under it).
  public var identity: FileIdentity? { FileIdentity(descriptor: descriptor) }

  /// Whether `path` names the file this reader has open (whatever the spelling: `./x`, a
  /// symbolic link, a hard link). False when nothing is at `path`.
  public func isSameFile(as path: String) -> Bool { ReplacementFile.sameFile(descriptor: descriptor, path) }

  /// What the kernel says an open descriptor is: the file's canonical path when it was opened.
  private static func pathOf(_ descriptor: CInt) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
    guard length > 0 else { return nil }
    return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// Reads up to `frames` interleaved frames (`frames × channels` floats) into `buffer`.
  ///
  /// Returns the frames read: fewer than asked near the end, 0 at the end of the file. Does not
  /// allocate, except the first time a 16-bit file is read with a larger block than before (and
  /// to build the error it throws). 16-bit samples s become s / 32768 exactly.
  ///
  /// - Throws: ``AudioError/Code/unreadableFile`` when libsndfile reports a read error.
  public func read(into buffer: UnsafeMutablePointer<Float>, frames: Int) throws(AudioError) -> Int {
    guard frames > 0 else { return 0 }
    let got: sf_count_t
    if readsShorts {
      let integers = shorts.pointer(capacity: frames * channels)
      got = sf_readf_short(file, integers, sf_count_t(frames))
      SampleConversion.float(from: integers, count: Int(max(got, 0)) * channels, into: buffer)
    } else {
      got = sf_readf_float(file, buffer, sf_count_t(frames))
    }
    if got < sf_count_t(frames), sf_error(file) != 0 {
      throw AudioError(.unreadableFile, "cannot read '\(path)': \(String(cString: sf_strerror(file)))")
    }
    return Int(max(got, 0))
  }

  /// Moves the read position to `toFrame` (0 is the start).
  ///
  /// - Throws: ``AudioError/Code/unreadableFile`` when the file cannot seek or the frame is out of range.
  public func seek(toFrame frame: Int64) throws(AudioError) {
    guard frame >= 0 else {
      throw AudioError(.invalidParameter, "cannot seek '\(path)' to frame \(frame): negative frame.")
    }
    if sf_seek(file, sf_count_t(frame), SEEK_SET) < 0 {
      throw AudioError(
        .unreadableFile, "cannot seek '\(path)' to frame \(frame): \(String(cString: sf_strerror(file)))")
    }
  }
}

@available(*, unavailable)
extension SoundFileReader: Sendable {}

/// Writes interleaved 32-bit float frames to an audio file through libsndfile.
///
/// The container comes from the file extension (see ``writableExtensions``); the sample encoding
/// from ``SampleEncoding``, except for the lossy codecs (`.ogg`/`.oga` Vorbis, `.opus` Ogg Opus,
/// `.mp3`), which ignore it. Float samples outside [-1, 1] are clipped, never wrapped, when stored
/// as integers. Not `Sendable`: one thread owns a writer.
///
/// Nothing is destroyed: the samples go to a hidden temporary file beside `path`
/// (``ReplacementFile``), which ``close()`` renames over `path` once the file is complete. A writer
/// released without `close()` (an error, an interruption) leaves `path` as it was and no
/// temporary file.
public final class SoundFileWriter {
  /// The path being written (replaced on ``close()``).
  public let path: String
  /// Frames per second.
  public let sampleRate: Int
  /// Interleaved channels per frame.
  public let channels: Int
  /// The encoding asked for (ignored by lossy containers).
  public let encoding: SampleEncoding

  private var file: OpaquePointer?
  private let replacement: ReplacementFile

  private struct Container {
    var name: String
    var major: Int32
    /// The subtype of a lossy container; nil: the subtype is the encoding.
    var lossySubtype: Int32?
    var allowedEncodings: [SampleEncoding]
    /// Sample rates the codec accepts; nil: any.
    var allowedRates: [Int]?
    var maxChannels: Int
  }

  private static func container(forExtension ext: String) -> Container? {
    let all = SampleEncoding.allCases
    switch ext {
    case "wav", "wave":
      return Container(
        name: "WAV", major: Int32(SF_FORMAT_WAV), allowedEncodings: all, maxChannels: 1024)
    case "aif", "aiff":
      return Container(
        name: "AIFF", major: Int32(SF_FORMAT_AIFF), allowedEncodings: all, maxChannels: 1024)
    case "flac":
      return Container(
        name: "FLAC", major: Int32(SF_FORMAT_FLAC), allowedEncodings: [.pcm16, .pcm24], maxChannels: 8)
    case "ogg", "oga":
      return Container(
        name: "Ogg Vorbis", major: Int32(SF_FORMAT_OGG), lossySubtype: Int32(SF_FORMAT_VORBIS),
        allowedEncodings: all, maxChannels: 255)
    case "opus":
      return Container(
        name: "Ogg Opus", major: Int32(SF_FORMAT_OGG), lossySubtype: Int32(SF_FORMAT_OPUS),
        allowedEncodings: all, allowedRates: [8000, 12000, 16000, 24000, 48000], maxChannels: 255)
    case "caf":
      return Container(
        name: "CAF", major: Int32(SF_FORMAT_CAF), allowedEncodings: all, maxChannels: 1024)
    case "w64":
      return Container(
        name: "W64", major: Int32(SF_FORMAT_W64), allowedEncodings: all, maxChannels: 1024)
    case "au":
      return Container(
        name: "AU", major: Int32(SF_FORMAT_AU), allowedEncodings: all, maxChannels: 1024)
    case "mp3":
      return Container(
        name: "MP3", major: Int32(SF_FORMAT_MPEG), lossySubtype: Int32(SF_FORMAT_MPEG_LAYER_III),
        allowedEncodings: all,
        allowedRates: [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000], maxChannels: 2)
    default:
      return nil
    }
  }

  private static let candidateExtensions = [
    "wav", "wave", "aif", "aiff", "flac", "ogg", "oga", "opus", "caf", "w64", "au", "mp3",
  ]

  private static let writable: [String] = candidateExtensions.filter { ext in
    guard let container = container(forExtension: ext) else { return false }
    let encoding = container.allowedEncodings.contains(.pcm16) ? SampleEncoding.pcm16 : container.allowedEncodings[0]
    var info = SF_INFO()
    info.samplerate = 48000
    info.channels = 2
    info.format = container.major | (container.lossySubtype ?? encoding.sndfileSubtype)
    return sf_format_check(&info) != 0
  }

  /// The encodings the format named by `path`'s extension can store (all of them for the lossy
  /// codecs, which ignore the encoding); nil for an extension that names no writable format.
  public static func encodings(forPath path: String) -> [SampleEncoding]? {
    let ext = fileExtension(path)
    guard writableExtensions.contains(ext) else { return nil }
    return container(forExtension: ext)?.allowedEncodings
  }

  /// The name of the format `path`'s extension names ("FLAC", "WAV", …), nil for none.
  public static func formatName(forPath path: String) -> String? {
    container(forExtension: fileExtension(path))?.name
  }

  /// The lower-case extension of the last component of `path` ("" for none).
  private static func fileExtension(_ path: String) -> String {
    let fileName = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? path
    guard let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex else { return "" }
    return fileName[fileName.index(after: dot)...].lowercased()
  }

  /// The file extensions (lower case, without the dot) that this machine's libsndfile can write,
  /// determined at run time: `.mp3`, for one, needs a libsndfile built with LAME.
  public static var writableExtensions: [String] { writable }

  /// libsndfile's version string, e.g. "libsndfile-1.2.0".
  public static var libraryVersion: String { String(cString: sf_version_string()) }

  /// Prepares to write `path`: a temporary file beside it, renamed over it by ``close()``.
  ///
  /// - Throws: ``AudioError/Code/unwritableFile`` for an extension that names no writable format
  ///   (the message lists the supported ones) or a file libsndfile cannot create;
  ///   ``AudioError/Code/invalidParameter`` for an encoding, sample rate or channel count the
  ///   format does not allow (FLAC with `float`/`pcm32`, Opus at 44100 Hz, …).
  public init(path: String, sampleRate: Int, channels: Int, encoding: SampleEncoding) throws(AudioError) {
    self.path = path
    self.sampleRate = sampleRate
    self.channels = channels
    self.encoding = encoding

    let ext = Self.fileExtension(path)
    let supported = Self.writableExtensions.map { "." + $0 }.joined(separator: ", ")
    guard let container = Self.container(forExtension: ext), Self.writableExtensions.contains(ext) else {
      let what = ext.isEmpty ? "has no extension" : "has extension '.\(ext)', which names no writable format"
      throw AudioError(.unwritableFile, "cannot write '\(path)': it \(what); supported: \(supported).")
    }
    guard sampleRate > 0, sampleRate <= 1_000_000 else {
      throw AudioError(.invalidParameter, "cannot write '\(path)': sample rate \(sampleRate) Hz is out of range.")
    }
    guard channels >= 1, channels <= container.maxChannels else {
      throw AudioError(
        .invalidParameter,
        "cannot write '\(path)': \(container.name) holds 1 to \(container.maxChannels) channels, not \(channels).")
    }
    guard container.allowedEncodings.contains(encoding) else {
      throw AudioError(
        .invalidParameter,
        "cannot write '\(path)': \(container.name) cannot store encoding '\(encoding.rawValue)'; use "
          + container.allowedEncodings.map { "'\($0.rawValue)'" }.joined(separator: " or ") + ".")
    }
    if let rates = container.allowedRates, !rates.contains(sampleRate) {
      throw AudioError(
        .invalidParameter,
        "cannot write '\(path)': \(container.name) does not support \(sampleRate) Hz; use one of "
          + rates.map(String.init).joined(separator: ", ") + " Hz.")
    }

    var info = SF_INFO()
    info.samplerate = Int32(sampleRate)
    info.channels = Int32(channels)
    info.format = container.major | (container.lossySubtype ?? encoding.sndfileSubtype)
    guard sf_format_check(&info) != 0 else {
      throw AudioError(
        .invalidParameter,
        "cannot write '\(path)': libsndfile cannot write \(container.name) with encoding '\(encoding.rawValue)', "
          + "\(channels) channels at \(sampleRate) Hz.")
    }
    let replacement: ReplacementFile
    do { replacement = try ReplacementFile(replacing: path, durability: .whenReplacing) } catch {
      throw AudioError(.unwritableFile, "cannot write '\(path)': \(error)")
    }
    let file: OpaquePointer
    switch openSndfile(descriptor: replacement.descriptor, mode: Int32(SFM_WRITE), info: &info) {
    case .success(let opened): file = opened
    case .failure(let reason): throw AudioError(.unwritableFile, "cannot write '\(path)': \(reason.text)")
    }
    self.replacement = replacement
    // Float → integer conversion clips instead of wrapping around.
    sf_command(file, Int32(SFC_SET_CLIPPING), nil, Int32(SF_TRUE))
    self.file = file
    self.writesShorts = encoding == .pcm16 && container.lossySubtype == nil
  }

  deinit { discard() }

  /// 16-bit PCM is converted here and written as integers, for the reason `SoundFileReader`
  /// reads them so: x becomes round(x × 32768) clipped to the 16-bit range, the exact inverse of
  /// reading, so a file copied at unity gain is bit-identical.
  private let writesShorts: Bool
  private let shorts = ScratchBuffer<Int16>()

  /// Appends `frames` interleaved frames (`frames × channels` floats).
  ///
  /// - Throws: ``AudioError/Code/unwritableFile`` when libsndfile cannot write them all (disk full,
  ///   …) or the writer is closed.
  public func write(_ interleaved: UnsafePointer<Float>, frames: Int) throws(AudioError) {
    guard let file else {
      throw AudioError(.unwritableFile, "cannot write '\(path)': the file is already closed.")
    }
    guard frames > 0 else { return }
    let written: sf_count_t
    if writesShorts {
      let count = frames * channels
      let integers = shorts.pointer(capacity: count)
      SampleConversion.int16(from: interleaved, count: count, into: integers)
      written = sf_writef_short(file, integers, sf_count_t(frames))
    } else {
      written = sf_writef_float(file, interleaved, sf_count_t(frames))
    }
    if written != sf_count_t(frames) {
      throw AudioError(
        .unwritableFile,
        "cannot write '\(path)': wrote \(max(written, 0)) of \(frames) frames: \(String(cString: sf_strerror(file)))")
    }
  }

  /// Finishes the file (headers, codec trailers) and renames it over `path`. Calling it again
  /// does nothing; releasing the writer without it discards what was written.
  public func close() throws(AudioError) {
    guard let file else { return }
    self.file = nil
    let status = sf_close(file)
    if status != 0 {
      replacement.discard()
      throw AudioError(.unwritableFile, "cannot finish '\(path)': \(String(cString: sf_error_number(status)))")
    }
    do { try replacement.commit() } catch {
      throw AudioError(.unwritableFile, "cannot finish '\(path)': \(error)")
    }
  }

  /// Stops writing and removes what was written; `path` stays as it was. Nothing after ``close()``.
  public func discard() {
    if let file { sf_close(file) }
    file = nil
    replacement.discard()
  }
}

@available(*, unavailable)
extension SoundFileWriter: Sendable {}

/// Memory that grows to the largest size asked of it and is reused: conversion space for a
/// reader or writer, allocated once per size increase instead of once per block.
final class ScratchBuffer<Element> {
  private var storage: UnsafeMutablePointer<Element>?
  private var capacity = 0

  func pointer(capacity wanted: Int) -> UnsafeMutablePointer<Element> {
    if wanted > capacity || storage == nil {
      storage?.deallocate()
      storage = .allocate(capacity: max(wanted, 1))
      capacity = max(wanted, 1)
    }
    return storage!
  }

  deinit { storage?.deallocate() }
}
